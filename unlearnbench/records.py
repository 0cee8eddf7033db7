"""The typed records of a run: its identity (`config.yaml`), a request's row of `metrics.jsonl` and its `summary.json`.

The planner and the runner build them, `RunDirectory` writes and reads them, and every reader (console, loggers,
leaderboard, plots, chains, tuning, suite) takes their attributes instead of re-interpreting a dict,
so what a field holds is written down once, here. `to_json` gives the object the file holds, key
for key and in order (a record read and written again is the same line); `from_json` refuses an
object that is not a record, naming the key and what is wrong, so a damaged line is reported where
it is read rather than as a `KeyError` somewhere in a table.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import MISSING, dataclass, fields
from typing import Any, Literal

#: What a request's row says of it: scored (`ok`), or the request at which the run stopped (`diverged`: its
#: `method` holds the timings only, and it has no oracle or single-shot scores).
REQUEST_STATUSES = ("ok", "diverged")

#: One model's scores after a request: metric key (`evaluation.keys.METRIC_KEYS`, plus the runner's timings, gaps
#: and geometry) -> a number or None; `history` is a list (accuracy on every F_s).
Scores = dict[str, Any]


class MalformedRecordError(ValueError):
    """A JSON object that is not a record; the message names the key and the problem, in a few words."""


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return value is None or isinstance(value, int | float)


def _check_scores(name: str, value: Any, optional: bool) -> None:
    """`value` is a `Scores` object (or null, where `optional`); else a `MalformedRecordError` naming the culprit."""
    if value is None and optional:
        return
    if not isinstance(value, dict):
        wanted = "an object of scores or null" if optional else "an object of scores"
        raise MalformedRecordError(f"{name!r} is {type(value).__name__}, not {wanted}")
    for key, score in value.items():
        if not (_is_number(score) or (isinstance(score, list) and all(_is_number(item) for item in score))):
            raise MalformedRecordError(f"{name}[{key!r}] is {score!r}, not a number, null or a list of numbers")


def _check_object(data: Any, required: tuple[str, ...], what: str) -> None:
    """`data` is a JSON object with every `required` key."""
    if not isinstance(data, dict):
        raise MalformedRecordError(f"a JSON {type(data).__name__}, not {what}")
    missing = [key for key in required if key not in data]
    if missing:
        raise MalformedRecordError(f"missing key {missing[0]!r}")


#: The fields of a metrics row that are not a model's scores.
_ROW_HEADER = ("t", "status", "forget_classes", "cost")

#: The keys of a row's `cost`: wall and CPU seconds (the process's, every thread).
COST_KEYS = ("wall_s", "cpu_s")

#: A single-shot baseline (`--single-shot-baseline`) -> the row field holding its counterfactual's scores. Its keys
#: elsewhere carry the field's suffix: `forward_gain_cumulative`, `forward_failure_cumulative_mean`, ...
SINGLE_SHOT_FIELDS = {"single_task": "single_shot", "cumulative": "single_shot_cumulative"}


@dataclass(frozen=True)
class RequestRecord:
    """One finished request: a line of `metrics.jsonl`, the unit of resuming (a request is finished when its
    record is in the file). The fields are in the order written.

    `forget_classes` is None on a random stream (F_t is samples, not classes). `oracle` is None at a
    request off the oracle schedule (`--oracle-every`), and `single_shot` off the single-shot one
    (`--single-shot-every`): absent, never carried over from another request. `single_shot` is the
    single-task counterfactual (F_t alone, retain = train minus F_t) and `single_shot_cumulative` the
    one whose retain set is request t's (`--single-shot-baseline`). `original` is the pretrained
    model scored on request t's sets (and against its oracle where there is one): the "Original" row
    every paper table has beside "Retrain". `cost` is what the request cost the process that served it
    (`COST_KEYS`): the seconds since its previous row, or since its session began, so the pretrained model,
    the oracles and counterfactuals it trained and every evaluation are in it, and a run's rows add up to what
    it cost (a killed session's unfinished request, served again, aside). The fields after `single_shot` may be
    absent from rows written before they existed (read as None).
    """

    t: int
    status: str
    forget_classes: list[int] | None
    method: Scores
    oracle: Scores | None
    single_shot: Scores | None
    single_shot_cumulative: Scores | None = None
    original: Scores | None = None
    cost: dict[str, float] | None = None

    def to_json(self) -> dict:
        """The line's object, key for key as written (the score dicts are the record's own, not copies); the fields
        after `single_shot` only where they hold scores, so a row written before they existed reads back as it was."""
        return {
            field.name: getattr(self, field.name)
            for field in fields(self)
            if field.default is MISSING or getattr(self, field.name) is not None
        }

    @property
    def scored_models(self) -> dict[str, Scores | None]:
        """Every model scored at this request, by field: the method, the oracle, the counterfactuals, the original."""
        return {field.name: getattr(self, field.name) for field in fields(self) if field.name not in _ROW_HEADER}

    @classmethod
    def from_json(cls, data: Any) -> RequestRecord:
        """The record of a parsed line; a `MalformedRecordError` naming the key and the problem when it is not one."""
        names = tuple(field.name for field in fields(cls))
        _check_object(data, tuple(field.name for field in fields(cls) if field.default is MISSING), "a metrics row")
        unknown = [key for key in data if key not in names]
        if unknown:
            raise MalformedRecordError(f"unknown key {unknown[0]!r}")
        if not _is_int(data["t"]) or data["t"] < 1:
            raise MalformedRecordError(f"'t' is {data['t']!r}, not a request number")
        if data["status"] not in REQUEST_STATUSES:
            raise MalformedRecordError(f"'status' is {data['status']!r}, not one of {', '.join(REQUEST_STATUSES)}")
        classes = data["forget_classes"]
        if classes is not None and not (isinstance(classes, list) and all(_is_int(c) for c in classes)):
            raise MalformedRecordError(f"'forget_classes' is {classes!r}, not a list of class indices or null")
        _check_scores("method", data["method"], optional=False)
        for name in ("oracle", "single_shot", "single_shot_cumulative", "original"):
            _check_scores(name, data.get(name), optional=True)
        cost = data.get("cost")
        if cost is not None and not (
            isinstance(cost, dict)
            and set(cost) == set(COST_KEYS)
            and all(_is_number(v) and v is not None for v in cost.values())
        ):
            raise MalformedRecordError(f"'cost' is {cost!r}, not an object of {' and '.join(COST_KEYS)} seconds")
        return cls(**{name: data[name] for name in names if name in data})


@dataclass(frozen=True)
class MeasuredCost:
    """What runs cost, added up from their rows' `cost`: wall and CPU seconds, over the rows that recorded it (rows
    written before costs were, or by another version, have none: `rows` counts every row, `measured` those)."""

    wall_s: float = 0.0
    cpu_s: float = 0.0
    measured: int = 0
    rows: int = 0

    @classmethod
    def of(cls, rows: Sequence[RequestRecord]) -> MeasuredCost:
        costs = [row.cost for row in rows if row.cost is not None]
        return cls(sum(c["wall_s"] for c in costs), sum(c["cpu_s"] for c in costs), len(costs), len(rows))

    def __add__(self, other: MeasuredCost) -> MeasuredCost:
        return MeasuredCost(*(getattr(self, f.name) + getattr(other, f.name) for f in fields(self)))

    def describe(self) -> str:
        """`2.41 CPU-hours (1.30 wall-hours) measured`, and on how many rows where some have no cost."""
        if not self.measured:
            return "nothing measured (no row records its cost)"
        text = f"{self.cpu_s / 3600:.2f} CPU-hours ({self.wall_s / 3600:.2f} wall-hours) measured"
        return text if self.measured == self.rows else f"{text} on {self.measured} of {self.rows} requests"


@dataclass(frozen=True)
class RunSummary:
    """`summary.json`: what the run's scored requests add up to, written when a session ends.

    It is derived from `metrics.jsonl` (and rewritten when the two disagree), so a reader that
    needs a request's numbers reads the records instead. `scores` is `stream_summary`'s: its keys
    depend on the schedules (no `mean_gap` without an oracle, no `forward_failure` without a
    single-shot counterfactual), hence a dict; it is empty when no request was scored.
    `status` is `complete` or `diverged` (then `diverged_at` is the request that diverged), or, on
    a node other than node 0 of a multi-node run, which node followed (nothing is written there).
    """

    requests_done: int
    scores: dict[str, Any]
    status: str
    diverged_at: int | None = None

    def to_json(self) -> dict:
        """The file's object: `requests_done`, the scores, `status`, and `diverged_at` where there is one."""
        data = {"requests_done": self.requests_done, **self.scores, "status": self.status}
        if self.diverged_at is not None:
            data["diverged_at"] = self.diverged_at
        return data

    @classmethod
    def from_json(cls, data: Any) -> RunSummary:
        """The summary of a parsed `summary.json`; a `MalformedRecordError` naming the problem when it is not one."""
        _check_object(data, ("requests_done", "status"), "a run summary")
        if not _is_int(data["requests_done"]) or data["requests_done"] < 0:
            raise MalformedRecordError(f"'requests_done' is {data['requests_done']!r}, not a number of requests")
        if not isinstance(data["status"], str):
            raise MalformedRecordError(f"'status' is {data['status']!r}, not a word")
        diverged_at = data.get("diverged_at")
        if diverged_at is not None and not _is_int(diverged_at):
            raise MalformedRecordError(f"'diverged_at' is {diverged_at!r}, not a request number")
        scores = {key: value for key, value in data.items() if key not in ("requests_done", "status", "diverged_at")}
        return cls(data["requests_done"], scores, data["status"], diverged_at)


#: Where a run stands, as `run_status` reads it from its files: every request served (`complete`), stopped at one
#: that diverged (`diverged`), a session ended by an error it recorded (`failed`), or none of these yet (`unfinished`).
RunStatus = Literal["complete", "diverged", "failed", "unfinished"]


def ended_diverged(rows: Sequence[RequestRecord]) -> bool:
    """Whether the run stopped at a request that diverged: no request is served after one, so it is the last row."""
    return bool(rows) and rows[-1].status == "diverged"


def is_finished(rows: Sequence[RequestRecord], requests: int) -> bool:
    """Every one of `requests` served, or stopped where one diverged: nothing is left to serve, and `summary.json`
    is written for it."""
    return len(rows) >= requests or ended_diverged(rows)


def run_status(summary: RunSummary | None, requests: int, failed: bool) -> RunStatus:
    """Where a run of `requests` stands, from its `summary.json` and whether a session recorded an
    error (`error.json`): the one reading of them, for `suite --check` and the leaderboard alike. A finished or
    diverged summary wins over an error: a process that could not read the finished run (an older version, meeting a
    newer row) records an error without changing what the run holds."""
    if summary is not None and summary.status == "diverged":
        return "diverged"
    if summary is not None and summary.requests_done >= requests:
        return "complete"
    return "failed" if failed else "unfinished"


def _is_name(value: Any) -> bool:
    return isinstance(value, str)


def _is_mapping(value: Any) -> bool:
    return isinstance(value, dict)


def _is_precision(value: Any) -> bool:
    return isinstance(value, str) or _is_int(value)  # Lightning's `32-true`, or a YAML config's `32`


def _is_size(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _is_guard_list(value: Any) -> bool:
    return isinstance(value, list) and all(
        isinstance(guard, dict) and len(guard) == 1 and all(_is_mapping(args) for args in guard.values())
        for guard in value
    )


def _optional(check: Callable[[Any], bool]) -> Callable[[Any], bool]:
    return lambda value: value is None or check(value)


#: What `RunIdentity.from_json` requires of each field's value: a check, and what it must be (for the message).
_IDENTITY_CHECKS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "method": (_is_name, "a method name"),
    "method_args": (_is_mapping, "a mapping of hyperparameters"),
    "stream": (_is_name, "a stream kind"),
    "size": (_is_size, "a number"),
    "requests": (_is_int, "a number of requests"),
    "dataset": (_is_name, "a dataset name"),
    "arch": (_is_name, "an arch name"),
    "seed": (_is_int, "a seed"),
    "oracle": (_is_name, "an oracle kind"),
    "mia_protocol": (_is_name, "an attack protocol"),
    "recipe": (_is_mapping, "a mapping (the training recipe)"),
    "precision": (_is_precision, "a precision"),
    "dataset_args": (_optional(_is_mapping), "a mapping"),
    "arch_args": (_optional(_is_mapping), "a mapping"),
    "oracle_every": (_is_int, "a number of requests"),
    "single_shot_every": (_optional(_is_int), "a number of requests"),
    "single_shot_baseline": (_is_name, "a single-shot baseline"),
    "guards": (_optional(_is_guard_list), "a list of {guard: arguments}"),
    "tuned": (_optional(_is_mapping), "a mapping"),
    "split": (_is_name, "a split name"),
    "train_seed": (_optional(_is_int), "a seed"),
    "unlearn_seed": (_optional(_is_int), "a seed"),
    "stream_seed": (_optional(_is_int), "a seed"),
    "oracle_seeds": (_is_int, "a number of oracles"),
    "metrics": (_optional(_is_mapping), "a mapping of metric -> the gaps it enters"),
    "relearn_every": (_is_int, "a number of requests"),
    "relearn_steps": (_optional(_is_int), "a number of steps"),
    "relearn_fraction": (_optional(_is_size), "a number"),
    "relearn_margin": (_optional(_is_size), "a number"),
    "quantize_every": (_is_int, "a number of requests"),
    "quantize_bits": (_optional(lambda v: isinstance(v, list) and all(_is_int(b) for b in v)), "a list of bit widths"),
}


@dataclass(frozen=True)
class RunIdentity:
    """Everything a run's numbers depend on: `config.yaml`, hashed into its folder's name (`rundir.identity_hash`).

    Two runs with equal identities are one run: a second invocation resumes it, and the leaderboard
    counts it once; anything that differs (a hyperparameter, a guard, the precision) is another run.
    `RunConfig.identity` builds it, with the method's and guards' defaults filled in and every value
    normalized through JSON, so it equals its own YAML round trip. The fields after `precision` are
    written only where they depart from their defaults, so runs made before each existed keep their
    names; `to_json` therefore gives exactly the object the file holds, and hashes to the same name.
    """

    method: str
    #: the method's hyperparameters, its defaults filled in, a group a mapping of its fields (`optim: {lr: ...}`)
    method_args: dict
    stream: str
    size: int | float
    requests: int
    dataset: str
    arch: str
    seed: int
    oracle: str
    mia_protocol: str
    recipe: dict
    precision: str | int
    dataset_args: dict | None = None
    arch_args: dict | None = None
    oracle_every: int = 1
    single_shot_every: int | None = None
    single_shot_baseline: str = "single_task"
    #: the guards in the order they are applied, each `{name: its arguments, defaults filled in}`
    guards: list[dict] | None = None
    #: where tuned hyperparameters came from (`hparams.marker`)
    tuned: dict | None = None
    split: str = "test"
    #: a seed part, where it departs from `seed`
    train_seed: int | None = None
    unlearn_seed: int | None = None
    stream_seed: int | None = None
    oracle_seeds: int = 1
    #: the user's metrics that enter a gap, with the gaps (`keys.user_gap_metrics`; None: only built-in ones do)
    metrics: dict | None = None
    #: the relearning attack's schedule and, where it runs, its settings (`evaluation.relearn`)
    relearn_every: int = 0
    relearn_steps: int | None = None
    relearn_fraction: float | None = None
    relearn_margin: float | None = None
    #: the quantization schedule and, where it runs, its bit widths (`evaluation.quantization`)
    quantize_every: int = 0
    quantize_bits: list[int] | None = None

    @property
    def guard_names(self) -> list[str]:
        """The guards' names in the order they are applied."""
        return [name for guard in self.guards or [] for name in guard]

    def to_json(self) -> dict:
        """The object `config.yaml` holds: every field without a default, then those that depart from theirs."""
        return {
            f.name: getattr(self, f.name)
            for f in fields(self)
            if f.default is MISSING or getattr(self, f.name) != f.default
        }

    def named_json(self) -> dict:
        """The object a run folder's name hashes (`rundir.identity_hash`): `to_json` with each group of `method_args`
        by its fields, as identities were written before the SGD settings were a group (`lr` beside `ratio`), so
        that the folders of those runs keep their names: the same command resumes them."""
        data = self.to_json()
        groups = _groups_of(self.method_args, self.method)
        data["method_args"] = {
            field: value
            for name, argument in self.method_args.items()
            for field, value in (
                argument.items() if name in groups and isinstance(argument, dict) else [(name, argument)]
            )
        }
        return data

    @classmethod
    def from_json(cls, data: Any) -> RunIdentity:
        """The identity of a parsed `config.yaml`; a `MalformedRecordError` naming the key and the problem."""
        required = tuple(f.name for f in fields(cls) if f.default is MISSING)
        _check_object(data, required, "a run's configuration")
        unknown = [key for key in data if key not in _IDENTITY_CHECKS]
        if unknown:
            raise MalformedRecordError(f"unknown key {unknown[0]!r}")
        for key, value in data.items():
            check, wanted = _IDENTITY_CHECKS[key]
            if not check(value):
                raise MalformedRecordError(f"{key!r} is {value!r}, not {wanted}")
        return cls(**{**data, "method_args": legacy_method_args(data["method_args"], method=data["method"])})


#: The SGD settings of a gradient method's `optim` group as files named them before they were a group (frozen).
FLAT_SETTINGS = ("lr", "epochs", "batch_size", "momentum", "weight_decay")


#: The built-in methods when the SGD settings became a group (frozen): only their records can spell them flat. A
#: plugin's own flat arguments of those names (a method taking `lr` ... `weight_decay` itself) stay where it put them.
FLAT_ERA_METHODS = frozenset((
    "bad_teacher", "boundary_expand", "boundary_shrink", "cf_k", "continual_loft", "coun", "coun_rl", "delete", "eu_k",
    "finetune", "fisher", "ga", "influence", "jit", "l1_sparse", "l2ul", "lfssd", "loft", "munba", "neggrad_plus", "rl",
    "rum", "salun", "scar", "scrub", "sfron", "ssd", "unsir",
))  # fmt: skip


def _groups_of(arguments: dict, method: str | None = None) -> dict[str, list[str]]:
    """The groups of a method's recorded `arguments`, no method imported (a leaderboard imports none): `optim` where
    they hold it as a mapping of SGD settings, or, for a method of `FLAT_ERA_METHODS` (None: any), hold every SGD
    setting flat (an identity records them all, its defaults filled in)."""
    if method is not None and method not in FLAT_ERA_METHODS and "optim" not in arguments:
        return {}
    group = arguments.get("optim")
    nested = isinstance(group, dict) and set(group) <= set(FLAT_SETTINGS)
    return {"optim": list(FLAT_SETTINGS)} if nested or set(FLAT_SETTINGS) <= set(arguments) else {}


def legacy_method_args(
    arguments: dict, settings: Mapping[str, Sequence[str]] | None = None, method: str | None = None
) -> dict:
    """A method's `arguments` with a group's fields written flat (`lr: 0.1` beside `ratio`, as tuned files, run
    identities and recorded defaults were before the SGD settings were a group) moved into the group (`optim: {lr:
    0.1}`); arguments written nested are returned as they are. `settings`: the fields of each of the method's groups
    (`methods.base.group_settings`, where the method is imported: a tuned file's subset of them); None: judged from the
    arguments and the `method`'s name alone (`_groups_of`). The one reader of the flat spelling: tuned files
    (`hparams.load_tuned`) and run folders made then still load, resume and sit beside new ones."""
    moved = dict(arguments)
    for group, names in (_groups_of(arguments, method) if settings is None else settings).items():
        if group in arguments:  # written nested already
            continue
        flat = {name: moved.pop(name) for name in names if name in arguments}
        if flat:
            moved[group] = flat
    return moved
