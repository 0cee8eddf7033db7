"""The ε score's oracle-versus-oracle floor by N, as `unlearnbench.evaluation.privacy.EPS_FLOOR` holds it.

    python benchmarks/eps_floor.py [N ...]

For each N (default: every N the table holds) it runs `privacy.simulated_eps_floor(N)` at its
defaults (3,000 examples, seed 0: two samples of N standard-normal φ per example, scored by the
challenge's rules) and prints F, its standard error and the CPU seconds it took, then the table
as a Python literal. About 20–30 CPU-seconds per N, most of it the per-example rule grid.
"""

from __future__ import annotations

import argparse
import time

from unlearnbench.evaluation.privacy import EPS_FLOOR, simulated_eps_floor


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", type=int, nargs="*", help="the N to simulate (default: the table's)")
    args = parser.parse_args()
    table = {}
    for models in args.models or sorted(EPS_FLOOR):
        start = time.process_time()
        floor, error = simulated_eps_floor(models)
        table[models] = round(floor, 3)
        print(f"N = {models}: F = {floor:.4f} ± {error:.4f} ({time.process_time() - start:.0f} CPU s)", flush=True)
    print("EPS_FLOOR = {" + ", ".join(f"{models}: {floor}" for models, floor in table.items()) + "}")


if __name__ == "__main__":
    main()
