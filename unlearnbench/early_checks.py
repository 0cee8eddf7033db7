"""The checks of a run's own options that need neither torch nor Lightning: a refused input costs well under 2 s.

Importing the methods (Lightning modules), the datasets and the archs takes seconds, and a typo should not
wait for it. What can be decided from the options alone is decided here: the names against the registries'
sources (`Registry.catalog`, nothing imported), the counts, seeds and sizes, the data folder, and the values of a
built-in class's arguments, from what `known_arguments` records of it (`check_dataset_arguments`,
`check_arch_arguments`, `check_numbers`, `check_group_spelling`), the stream against a built-in dataset's declared
size (`check_stream_size`) and the hardware's words as the recorded Lightning lists them (`check_hardware_choices`).
`RunConfig.validate` runs these checks again on every run (a suite's cells and tuning trials do not come through the
command line, a plugin's class is known only once imported), with what the live classes say, and then the rest (the
devices, the output folders). The data folder is checked where data is about to be read (`run`, `tune`, a suite that runs), not by
`suite --check`, which may run where the data is not.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import fields, is_dataclass
from pathlib import Path

from unlearnbench.errors import ConfigError, excerpt
from unlearnbench.recipe import Recipe

#: The run's options that are seeds: the whole one, and the parts that may be set apart (`--train-seed`...).
SEED_PARTS = ("train_seed", "unlearn_seed", "stream_seed")
#: The registered name each option of a run names, by option (the registry's attribute in `unlearnbench.registry`).
NAMED_OPTIONS = {"method": "METHODS", "stream": "STREAMS", "dataset": "DATASETS", "arch": "ARCHS", "logger": "LOGGERS"}
#: `--single-shot-baseline`: which counterfactuals the forward-failure gain is measured against
SINGLE_SHOT_BASELINES = ("single_task", "cumulative", "both")
#: The run's options that take one of a few words, and those words (the first is the default).
CHOICES = {
    "oracle": ("retrain", "none"),
    "single_shot_baseline": SINGLE_SHOT_BASELINES,
    "mia_protocol": ("salun", "loft"),
    "split": ("test", "validation"),
}
#: The weight widths `--quantize-bits` may name (`evaluation.quantization`): int8 and 4-bit, as Zhang et al. (2024).
QUANTIZATION_BITS = (8, 4)


def check_run_options(options: Mapping[str, object]) -> None:
    """A run's options as a mapping of their values (a suite cell's, a tune study's): the registered names, the
    guards' names and the numbers, as `unlearnbench run` checks its command line before anything heavy is imported."""
    from unlearnbench.registry import GUARDS

    check_names(options)
    for guard in options.get("guards") or ():
        if guard not in GUARDS.catalog():
            raise ConfigError(f"unknown guard {excerpt(guard)}; choose one of: {', '.join(GUARDS.catalog())}")
    check_run_numbers(options)
    check_run_choices(options)
    recipe = options.get("recipe")
    if isinstance(recipe, Mapping):  # anything else is the parser's or the schema's to refuse, naming the type
        check_recipe(recipe)


def check_run_choices(values: Mapping[str, object]) -> None:
    """The options that take one of a few words (`CHOICES`), among `values`; those absent pass."""
    for name, choices in CHOICES.items():
        if name in values and values[name] not in choices:
            raise ConfigError(f"unknown {name} {excerpt(values[name])}; choose one of: {', '.join(choices)}")


def is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def check_run_numbers(values: Mapping[str, object]) -> None:
    """Counts, seeds and sizes of a run that would fail late, hang or be silently changed; those absent pass."""
    if "requests" in values:
        requests = values["requests"]
        if not is_int(requests):
            raise ConfigError(f"requests must be a whole number, got {excerpt(requests)}")
        if requests < 1:
            raise ConfigError(f"requests must be >= 1, got {excerpt(requests)}")
    every = values.get("oracle_every", 1)
    if not is_int(every) or every < 1:
        raise ConfigError(f"oracle_every must be a whole number >= 1 (1: every request), got {excerpt(every)}")
    single_shot = values.get("single_shot_every")
    if single_shot is not None and (not is_int(single_shot) or single_shot < 0):
        raise ConfigError(f"single_shot_every must be a whole number >= 0 (0: none), got {excerpt(single_shot)}")
    for name in ("relearn_every", "relearn_steps", "quantize_every"):
        value = values.get(name, 0)
        if not is_int(value) or value < 0:
            meaning = "0: none" if name.endswith("every") else "the attack's optimizer steps"
            raise ConfigError(f"{name} must be a whole number >= 0 ({meaning}), got {excerpt(value)}")
    fraction = values.get("relearn_fraction", 0.5)
    if not (is_number(fraction) and 0 < fraction < 1):
        raise ConfigError(
            f"relearn_fraction must be a number between 0 and 1, both excluded (the share of the forgotten data the "
            f"attacker holds), got {excerpt(fraction)}"
        )
    margin = values.get("relearn_margin", 0.05)
    if not (is_number(margin) and 0 <= margin < 1):
        raise ConfigError(
            f"relearn_margin must be a number >= 0 and < 1 (0.05: within 5% of the original's accuracy), "
            f"got {excerpt(margin)}"
        )
    bits = values.get("quantize_bits", list(QUANTIZATION_BITS))
    valid = ", ".join(map(str, QUANTIZATION_BITS))
    if not isinstance(bits, list | tuple) or not bits or any(not is_int(b) or b not in QUANTIZATION_BITS for b in bits):
        raise ConfigError(f"quantize_bits must be a list of bit widths among {valid}, got {excerpt(bits)}")
    if len(set(bits)) != len(bits):
        raise ConfigError(f"quantize_bits names a width twice: {excerpt(bits)}")
    for name in ("seed", *SEED_PARTS):
        value = values.get(name, 0 if name == "seed" else None)
        if (value is not None or name == "seed") and (not is_int(value) or value < 0):
            raise ConfigError(f"{name} must be a whole number >= 0, got {excerpt(value)}")
    oracle_seeds = values.get("oracle_seeds", 1)
    if not is_int(oracle_seeds) or oracle_seeds < 1:
        raise ConfigError(f"oracle_seeds must be a whole number >= 1, got {excerpt(oracle_seeds)}")
    size = values.get("size")
    if size is not None and not (is_number(size) and math.isfinite(size) and size > 0):
        raise ConfigError(f"size must be a finite number > 0, got {excerpt(size)}")
    for name in ("download", "save_logits"):
        if not isinstance(values.get(name, False), bool):
            raise ConfigError(f"{name} must be true or false, got {excerpt(values[name])}")


def check_stream_size(
    stream: type, known: object, requests: int, size: float | None, train_size: int | None = None
) -> None:
    """The request stream of kind `stream` (its registered class) against the dataset's declared sizes (`known`: a
    `data.base.KnownSize`), without loading the data; `size` None is the kind's default, `train_size` a subset's."""
    from unlearnbench.streams.kinds import StreamError  # (numpy: imported where a stream is checked)

    try:
        stream().validate(
            train_size or known.num_train, known.num_classes, requests, stream.default_size if size is None else size
        )
    except StreamError as error:
        raise ConfigError(str(error)) from None


def check_hardware_choices(values: Mapping[str, object], choices: Mapping[str, Sequence[str]]) -> None:
    """`accelerator`, `strategy` and `precision` among `values` against the words Lightning takes (`choices`:
    `config.Hardware.choices`); those absent pass. A precision may be a number (`16`, in a suite's YAML)."""
    for name, valid in choices.items():
        if name in values and str(values[name]) not in valid:  # quoted alike, from the command line or a YAML number
            raise ConfigError(f"unknown {name} {str(values[name])!r}; choose one of: {', '.join(valid)}")


def check_data_dir(data_dir: str | Path | None, download: bool) -> None:
    """A data folder given explicitly exists (or `download` will create it): one that points nowhere is a typo,
    and the datasets' other places (the system's copy of Fashion-MNIST) would be used in silence instead."""
    if data_dir is None:
        return
    path = Path(data_dir).expanduser()
    if path.is_dir() or (download and not path.exists()):
        return
    if path.exists():
        raise ConfigError(f"--data-dir {data_dir} is not a folder; give the folder that holds the datasets")
    raise ConfigError(
        f"--data-dir {data_dir} does not exist; give the folder that holds the datasets, or add --download to "
        "fetch the dataset into it"
    )


def check_folder_part(kind: str, name: str) -> None:
    """A registered name becomes part of a run directory's name: one with a path separator (a plugin's entry point
    named `a/b`, `timm:x/../..`) would put the run directory elsewhere than in `--out`."""
    if any(separator in name for separator in ("/", "\\", "\0")):
        raise ConfigError(f"{kind} name {excerpt(name)} holds a path separator; a run directory is named by it")


def check_names(values: Mapping[str, object]) -> None:
    """Each registered name among `values` (`NAMED_OPTIONS`) is a built-in, an installed plugin or a name of an open
    family (`timm:<model>`, whose model is checked when the arch is built); read from source, nothing imported."""
    from unlearnbench import registry

    for option, attribute in NAMED_OPTIONS.items():
        name = values.get(option)
        if name is None:
            continue
        known: registry.Registry = getattr(registry, attribute)
        if not isinstance(name, str):
            raise ConfigError(f"{option} must be a name, got {excerpt(name)}")
        check_folder_part(known.kind, name)
        family, colon, _ = name.partition(":")
        if name in known.catalog() or (colon and family in known.families()):
            continue
        families = "".join(f", {family}:<name>" for family in known.families())
        raise ConfigError(
            f"unknown {known.kind} {excerpt(name)}; choose one of: {', '.join(known.catalog())}{families}"
        )


def _numeric(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


#: Hyperparameters that count something: at least 1 (a batch of 0, a fit of no step; Lightning reads epochs -1 as
#: "train forever").
COUNT_NAMES = ("epochs", "batch_size", "steps")


def check_numbers(values: dict, defaults: dict, what: str) -> None:
    """A number where the default is a number (finite), a flag where it is a flag, counts in range.

    YAML reads `1e-4` (no dot) and `1.0e4` (no exponent sign) as text; uncaught, such a value
    fails only when unlearning starts, after the pretrained model and the oracles were trained.
    """
    for name, value in values.items():
        default = defaults.get(name)
        if isinstance(default, bool):
            expected, ok = "true or false", isinstance(value, bool)
        elif isinstance(default, int):
            expected, ok = "a whole number", is_int(value)
        elif isinstance(default, float):
            expected, ok = "a number", is_number(value)
        else:
            continue
        if not ok:
            hint = " (YAML reads 1e-4 as text: write 1.0e-4)" if isinstance(value, str) and _numeric(value) else ""
            raise ConfigError(f"{what} {name} must be {expected}, got {value!r}{hint}")
        if not math.isfinite(value):
            raise ConfigError(f"{what} {name} must be finite, got {value!r}")
        if name.rpartition(".")[2] in COUNT_NAMES and not isinstance(default, bool) and value < 1:  # optim.epochs too
            raise ConfigError(f"{what} {name} must be >= 1, got {value!r}")


def check_recipe(values: Mapping[str, object]) -> None:
    """A run's recipe overrides: known keys, each a number of its default's type and counts >= 1 (`check_numbers`)."""
    names = [f.name for f in fields(Recipe)]
    unknown = sorted(set(values) - set(names))
    if unknown:
        raise ConfigError(f"unknown recipe key(s) {', '.join(unknown)}; valid: {', '.join(names)}")
    check_numbers(dict(values), Recipe().as_dict(), "recipe key")


def check_group_spelling(method: str, settings: Mapping[str, Sequence[str]], names: Iterable[str]) -> None:
    """A group's field given at the method level (`lr`, the spelling before the SGD settings were a group), refused
    with the group's spelling (`--salun.optim.lr`). `settings`: the fields of each of the method's groups."""
    names = list(names)
    for group, fields_of_group in settings.items():
        moved = [name for name in names if name in fields_of_group]
        if moved:
            name = moved[0]
            raise ConfigError(
                f"method {method!r} takes {name} among its {group} settings: write --{method}.{group}.{name} "
                f"(YAML: {method}: {{{group}: {{{name}: ...}}}}), not --{method}.{name}"
            )


def check_group_mapping(method: str, group: str, settings: Sequence[str], given: object) -> None:
    """A method's group (`optim`) given as no mapping of its `settings` (`salun: {optim: 3}`); None: the defaults."""
    if not (given is None or isinstance(given, Mapping) or is_dataclass(given)):
        raise ConfigError(f"{group} of method {method!r} must be a mapping of {', '.join(settings)}, got {given!r}")


def check_section(key: str, value: object, names: Iterable[str]) -> None:
    """A --config file's section of an argument group (`salun: 3`, `dataset_args: [1]`) that is no mapping of the
    group's arguments (`names`): the parser takes it as the group's value, which no run can read."""
    if value is not None and not isinstance(value, Mapping):
        raise ConfigError(
            f"{key} in --config must be a mapping of its arguments to values (its arguments: "
            f"{', '.join(names) or 'none'}), got {excerpt(value)}"
        )


def check_dataset_arguments(
    name: str, args: Mapping[str, object], parameters: Mapping[str, tuple[object, object]], known: object | None
) -> None:
    """`args` against dataset `name`'s `parameters` (argument -> (type, default), `data.cache.dataset_parameters`)
    and its declared sizes (`known`: a `data.base.KnownSize`, None where it declares none).

    Flags (`augment`) must be true or false; every other argument is a whole number (sizes,
    `image_size`) >= 1, and a subset no larger than the split where the dataset declares its size.
    """
    unknown = sorted(set(args) - set(parameters))
    if unknown:
        raise ConfigError(
            f"dataset {name!r} has no argument(s) {', '.join(unknown)}; its arguments are: {', '.join(parameters)}"
        )
    for key, value in args.items():
        if value is None and parameters[key][1] is None:
            continue
        if parameters[key][0] is bool:
            if not isinstance(value, bool):
                raise ConfigError(f"dataset argument {key} must be true or false, got {value!r}")
            continue
        if not is_int(value) or value < 1:
            hint = " (or null: the whole split)" if key in ("train_size", "test_size") else ""
            raise ConfigError(f"dataset argument {key} must be a whole number >= 1{hint}, got {value!r}")
    limits = {"train_size": known and known.num_train, "test_size": known and known.num_test}
    for key, limit in limits.items():
        if limit and args.get(key) is not None and args[key] > limit:
            raise ConfigError(f"dataset argument {key}={args[key]} exceeds the {limit} samples of {name}'s split")
    if known and args.get("train_size") is not None and args["train_size"] < known.num_classes:
        raise ConfigError(
            f"dataset argument train_size={args['train_size']} is fewer than {name}'s {known.num_classes} classes"
        )
    if known and args.get("test_size") is not None and args["test_size"] < known.num_classes:
        # (the subset is class-balanced: one per class is the least that leaves every class a test sample)
        raise ConfigError(
            f"dataset argument test_size={args['test_size']} is fewer than {name}'s {known.num_classes} classes: the "
            f"SVC membership attack and the oracle attacks (LiRA, RMIA) take their non-members from the test samples "
            f"of the retained classes, and forget_test_acc those of the forgotten ones; give at least "
            f"{known.num_classes} (one per class)"
        )


def check_arch_arguments(arch: str, args: Mapping[str, object], defaults: Mapping[str, object]) -> None:
    """`args` against `arch`'s arguments (`defaults`: argument -> default, `training.arch_parameters`): known names,
    whole numbers >= 1 where the default is one."""
    unknown = sorted(set(args) - set(defaults))
    if unknown:
        valid = ", ".join(defaults) or "none"
        raise ConfigError(f"arch {arch!r} has no argument(s) {', '.join(unknown)}; its arguments are: {valid}")
    for key, value in args.items():
        if isinstance(defaults[key], int) and (not is_int(value) or value < 1):
            raise ConfigError(f"arch argument {key} must be a whole number >= 1, got {value!r}")
