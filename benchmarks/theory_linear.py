"""The plasticity-collapse theorem, checked numerically on a linear model with squared loss.

Model f(x) = θᵀx, L_D(θ) = ½·mean_{(x,y)∈D} (θᵀx − y)², so ∇L_D(θ) = M_D θ − b_D with
M_D = mean xxᵀ and b_D = mean x·y. One gradient step with step size η on the unlearning objective
J_t = λ·L_R − L_{F_t} is

    θ_t = θ_{t−1} − η(λ∇L_R − ∇L_{F_t})(θ_{t−1}) = A_t θ_{t−1} − c_t,
    A_t = I + M_F − λ M_R,  c_t = b_F − λ b_R          (η absorbed into M and b).

Construction: a k-dimensional subspace W (random orientation) shared by every forget set. F_t is
drawn fresh for every request *inside* W; the retain set has most of its energy in W⊥ and only a
weak component in W, drawn as separate samples, so M_F and M_R both leave W invariant. On W the
forget curvature dominates: vᵀ(M_F^t − λM_R)v ≥ ρ_t‖v‖² with ρ_t = λ_min of that k x k block > 0.
Then A_t restricted to W is symmetric with every eigenvalue ≥ 1 + ρ_t, so for any w ∈ W

    ‖A_{t:s} w‖ = ‖A_t ⋯ A_s w‖ ≥ Π_{u=s..t} (1 + ρ_u) ‖w‖ ≥ (1 + ρ)^{t−s+1} ‖w‖,   ρ = min_u ρ_u.

The script prints the bound beside the measured growth (the smallest growth over unit w ∈ W,
σ_min of A_{t:s} on W, and the growth of a random w), asserts the bound for every pair s ≤ t, then
runs the same stream through the package's own geometry code (`UpdateStore` + Gram-based ER/CO)
where the answer is known: the updates u_t = (M_F − λM_R)θ_{t−1} − c_t become dominated by their
exponentially growing W component, so the share of ‖u_t‖² in W → 1 and the top-k singular subspace
of U aligns with W (ER_t with r = k → 1). It prints ER/CO next to that ground truth and saves a plot.

    python benchmarks/theory_linear.py [--out benchmarks/out] [--requests 12] [--seed 0]

numpy + matplotlib only (plus the package); runs in seconds.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from unlearnbench.evaluation.geometry import compute_geometry
from unlearnbench.geometry_files import UpdateStore


def build_stream(rng: np.random.Generator, dim: int, k: int, requests: int, eta: float, lam: float):
    """Orthonormal bases of W and W⊥, retain moments, and per-request forget moments."""
    basis, _ = np.linalg.qr(rng.normal(size=(dim, dim)))
    B_W, B_perp = basis[:, :k], basis[:, k:]
    theta_star = rng.normal(size=dim)

    def moments(X: np.ndarray, noise: float) -> tuple[np.ndarray, np.ndarray, float]:
        y = X @ theta_star + noise * rng.normal(size=len(X))
        return eta * X.T @ X / len(X), eta * X.T @ y / len(X), y

    # retain: strong in W⊥, weak in W (separate samples so that M_R is block diagonal in W ⊕ W⊥)
    retain = np.vstack([rng.normal(size=(400, dim - k)) @ B_perp.T, 0.3 * rng.normal(size=(100, k)) @ B_W.T])
    M_R, b_R, _ = moments(retain, 0.1)
    forgets = []
    for _ in range(requests):
        scales = rng.uniform(1.5, 2.5, size=k)  # forget sets differ, all live in W
        X_F = (rng.normal(size=(60, k)) * scales) @ B_W.T
        M_F, b_F, _ = moments(X_F, 0.1)
        forgets.append((M_F, b_F, X_F))
    return B_W, theta_star, (M_R, b_R), forgets


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "out")
    parser.add_argument("--requests", type=int, default=12)
    parser.add_argument("--dim", type=int, default=40)
    parser.add_argument("--k", type=int, default=3, help="dimension of the shared forget subspace W")
    parser.add_argument("--eta", type=float, default=0.05)
    parser.add_argument("--lam", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    rng = np.random.default_rng(args.seed)
    T, k, lam = args.requests, args.k, args.lam
    B_W, theta_star, (M_R, b_R), forgets = build_stream(rng, args.dim, k, T, args.eta, lam)
    eye = np.eye(args.dim)

    # --- the recursion and the per-request curvature margin on W
    A = [eye + M_F - lam * M_R for M_F, _, _ in forgets]
    c = [b_F - lam * b_R for _, b_F, _ in forgets]
    rho_t = np.array([np.linalg.eigvalsh(B_W.T @ (M_F - lam * M_R) @ B_W).min() for M_F, _, _ in forgets])
    rho = rho_t.min()
    assert rho > 0, "construction failed: forget curvature does not dominate on W"
    invariance = max(np.linalg.norm((eye - B_W @ B_W.T) @ a @ B_W) for a in A)

    theta = [theta_star + 0.01 * rng.normal(size=args.dim)]  # "pretrained": near the full-data solution
    for t in range(T):
        M_F, b_F, _ = forgets[t]
        gradient_step = theta[-1] - ((lam * (M_R @ theta[-1] - b_R)) - (M_F @ theta[-1] - b_F))
        theta.append(A[t] @ theta[-1] - c[t])
        assert np.allclose(theta[-1], gradient_step), "A_t θ − c_t is one gradient step on J_t"
    theta = np.array(theta)

    # --- bound vs measured growth on W, for every s ≤ t
    w = B_W @ rng.normal(size=k)
    w /= np.linalg.norm(w)
    worst_ratio, table = np.inf, []
    for s in range(T):
        product = np.eye(args.dim)
        for t in range(s, T):
            product = A[t] @ product
            on_W = np.linalg.svd(product @ B_W, compute_uv=False)
            bound = (1 + rho) ** (t - s + 1)
            worst_ratio = min(worst_ratio, on_W.min() / bound)
            if s == 0:
                table.append((t + 1, bound, np.prod(1 + rho_t[: t + 1]), on_W.min(), np.linalg.norm(product @ w)))
    assert worst_ratio >= 1 - 1e-9, f"bound violated: measured/bound = {worst_ratio}"

    print(f"linear squared-loss stream: d={args.dim}, dim W={k}, T={T}, η={args.eta}, λ={lam}")
    print(f"ρ = min_t ρ_t = {rho:.4f}  (ρ_t from {rho_t.min():.4f} to {rho_t.max():.4f});")
    print(f"W-invariance of A_t: max ‖P_W⊥ A_t P_W‖ = {invariance:.2e}")
    print(f"min over all s ≤ t of measured σ_min(A_t:s on W) / (1+ρ)^(t−s+1) = {worst_ratio:.4f} (≥ 1: bound holds)")
    print("\n s=1:    t   (1+ρ)^t   Π(1+ρ_u)   min_w∈W ‖A_t:1 w‖   random w ∈ W")
    for t, bound, product_bound, smallest, random_w in table:
        print(f"        {t:2d}  {bound:9.4f}  {product_bound:9.4f}  {smallest:17.4f}  {random_w:13.4f}")

    # --- the same stream through the package's geometry code
    args.out.mkdir(parents=True, exist_ok=True)
    run_dir = args.out / "theory_linear_run"
    shutil.rmtree(run_dir, ignore_errors=True)
    store = UpdateStore(run_dir, T)
    updates = np.diff(theta, axis=0)
    for t in range(1, T + 1):
        store.write(t, updates[t - 1], [("theta", (args.dim,))])
    geometry = compute_geometry(store, T)
    share_W = np.sum((updates @ B_W) ** 2, axis=1) / np.sum(updates**2, axis=1)
    # principal angles between the top-k left singular subspace of U and W (explicit SVD is cheap here)
    Q = np.linalg.svd(updates.T.astype(np.float32).astype(np.float64), full_matrices=False)[0][:, :k]
    alignment = np.linalg.svd(B_W.T @ Q, compute_uv=False)
    forget_loss = [0.5 * np.mean((forgets[t][2] @ theta[t + 1] - forgets[t][2] @ theta_star) ** 2) for t in range(T)]

    print(f"\ngeometry (package code, basis U = [u_1 … u_{T}]); cos of principal angles top-{k}(U) vs W: ")
    print("    " + ", ".join(f"{a:.4f}" for a in alignment))
    header = f"{'t':>3} {'‖u_t‖':>10} {'share in W':>10} {'ER r=1':>8} {'ER r=k':>8} {'ER r90':>7} {'online r=k':>10}"
    print(header + f" {'CO_1':>10} {'CO_2':>10} {'CO_3':>10} {'cos prev':>8} {'L_F drift':>10}")
    er_k = f"er_r{min(k, 3)}"
    er_online = f"er_online_r{min(k, 3)}"
    for row, share, loss in zip(geometry, share_W, forget_loss, strict=True):
        print(
            f"{row['t']:3d} {row['update_norm']:10.4g} {share:10.4f} {row['er_r1']:8.4f} {row[er_k]:8.4f}"
            f" {row['er_r90']:7.4f} {_fmt(row[er_online]):>10} {row['co_1']:10.4g} {_fmt(row['co_2'], 'g'):>10}"
            f" {_fmt(row['co_3'], 'g'):>10} {_fmt(row['cos_prev']):>8} {loss:10.4g}"
        )

    path = plot(args.out / "theory_linear.png", table, rho, geometry, share_W, er_k, er_online)
    print(f"\nplot: {path}\nupdates: {store.path} (+ {store.header_path.name})")
    return 0


def _fmt(value, kind: str = "f") -> str:
    if value is None:
        return "—"
    return f"{value:.4g}" if kind == "g" else f"{value:.4f}"


def plot(path: Path, table, rho: float, geometry: list[dict], share_W: np.ndarray, er_k: str, er_online: str) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t = np.array([row[0] for row in table])
    figure, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    axes[0].semilogy(t, [row[1] for row in table], "k--", label=f"bound (1+ρ)^t, ρ={rho:.3f}")
    axes[0].semilogy(t, [row[3] for row in table], "o-", label="measured min over w ∈ W")
    axes[0].semilogy(t, [row[4] for row in table], "s-", alpha=0.7, label="random w ∈ W")
    axes[0].set(xlabel="request t", ylabel="‖A_t:1 w‖ / ‖w‖", title="growth on the forget subspace W")
    axes[0].legend()
    ts = [row["t"] for row in geometry]
    axes[1].plot(ts, share_W, "k--", label="share of ‖u_t‖² in W (truth)")
    axes[1].plot(ts, [row["er_r1"] for row in geometry], "o-", label="ER r=1")
    axes[1].plot(ts, [row[er_k] for row in geometry], "s-", label=f"ER {er_k[3:]}")
    axes[1].plot(
        ts, [np.nan if row[er_online] is None else row[er_online] for row in geometry], "^-", label="online ER"
    )
    twin = axes[1].twinx()
    twin.semilogy(ts, [row["update_norm"] for row in geometry], "r:", label="‖u_t‖")
    twin.set_ylabel("‖u_t‖", color="r")
    axes[1].set(xlabel="request t", ylabel="energy ratio", ylim=(-0.02, 1.05), title="ER_t (package geometry)")
    axes[1].legend(loc="lower right", fontsize=8)
    for i in (1, 2, 3):
        axes[2].plot(
            ts, [np.nan if row[f"co_{i}"] is None else row[f"co_{i}"] for row in geometry], "o-", label=f"CO {i}"
        )
    axes[2].set_yscale("symlog", linthresh=1e-2)
    axes[2].set(xlabel="request t", ylabel="Qᵀu_t", title="CO_t (sign-fixed)")
    axes[2].legend()
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return path


if __name__ == "__main__":
    raise SystemExit(main())
