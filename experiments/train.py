"""Train any model on any task, resume a run, or run one training run of a sweep preset.

Every command line, option and output file: ``main``.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

from experiments.cli import OptionError, OptionParser, add_config_options, name_options, refuse, value_parser
from experiments.models import MODEL_CONFIGS
from experiments.sweeps import load_sweep
from experiments.tasks import task_class, task_classes
from experiments.training import distributed
from experiments.training.config import TrainConfig, build_config, check_memory, option_fields, recorded_config
from experiments.training.loop import run
from experiments.training.rundir import RESUME_OVERRIDES, finished_record
from experiments.tuning import with_chosen_rates

USAGE = "%(prog)s (--model M [--task T] | --preset SWEEP/RUN | --resume DIR) [--option value ...] [-h]"
RUN_OPTIONS = ("model", "task", "run_dir", "resume", "preset", "params")  # the command line's options that are no config field


def parse_options(model, task, options):
    """``['--n', '16', '--lr=1e-3', '--no-recurrent']`` -> ``{"n": 16, "lr": 0.001, "recurrent": False}``:
    the config fields given, typed by ``build_parser(model, task)``. Raises ``cli.OptionError``
    (a ValueError) for an unknown option or a value of the wrong type, naming the option."""
    option_fields(model, task)  # refuses a field name shared by two of the configs
    namespace = build_parser(model, task).parse_args(["--model", model, "--task", task, *options])
    return {name: value for name, value in vars(namespace).items() if name not in RUN_OPTIONS}


def build_parser(model=None, task=None, options=True):
    """The command line of ``python -m experiments.train``: the run's own options and, unless
    ``options`` is false, every field of ``TrainConfig``, of ``task``'s config (default ``lm``) and
    of ``model``'s config (without a model, its options are listed by ``--model M --help``)."""
    task = task or "lm"
    parser = OptionParser(prog="python -m experiments.train", description=__doc__.split("\n\n")[0], usage=USAGE,
                          add_help=options, epilog=None if model or not options else
                          f"Each model adds the options of its config: --model M --help lists them "
                          f"(M one of {', '.join(MODEL_CONFIGS)}); --task T --help lists task T's.")
    run_options = parser.add_argument_group("run")
    run_options.add_argument("--model", choices=sorted(MODEL_CONFIGS), help="the model to train")
    run_options.add_argument("--task", default=None, choices=sorted(task_classes()), help="the task (default: lm)")
    run_options.add_argument("--run-dir", type=Path, default=None, help="the run directory (default: "
                             "runs/<model>-<task>-seed<seed>, or runs/<SWEEP>/<RUN> for --preset SWEEP/RUN)")
    run_options.add_argument("--resume", type=Path, default=None,
                             help="continue the run in this directory; the options given after it may change only "
                                  + ", ".join("--" + n.replace("_", "-") for n in RESUME_OVERRIDES))
    run_options.add_argument("--preset", default=None, help="SWEEP/RUN: one training run of a sweep preset or file")
    run_options.add_argument("--params", type=value_parser(int), default=None,
                             help="size the model to this many parameters (±2%%; its free size fields, "
                                  "experiments.params_budget.SEARCHABLE, that no option fixes)")
    if options:
        add_config_options(parser, TrainConfig, "training (TrainConfig)", excluded=("model", "task"))
        task_config = task_class(task).Config
        add_config_options(parser, task_config, f"task {task} ({task_config.__name__})")
        if model is not None:
            model_config = MODEL_CONFIGS[model]
            add_config_options(parser, model_config, f"model {model} ({model_config.__name__})",
                               excluded=("vocab_size",))
    return parser


def preset_parts(preset):
    """``SWEEP/RUN`` -> ``(SWEEP, RUN)``; a ValueError for any other form."""
    sweep, _, name = preset.rpartition("/")
    if not sweep or not name:
        raise ValueError(f"--preset takes SWEEP/RUN (for example charlm-ptb/rnn-O-seed0), got {preset!r}")
    return sweep, name


def preset_run_dir(preset):
    """The default directory of a preset run: ``runs/<SWEEP>/<RUN>`` (a sweep file by its stem)."""
    sweep, name = preset_parts(preset)
    return Path("runs") / (Path(sweep).stem if sweep.endswith(".py") else sweep) / name


def preset_argv(preset):
    """``--model M --task T --key value ...`` of run RUN in ``SWEEP/RUN`` (a preset, module or sweep file).

    A sweep that tunes its rates (``TUNING``) and has chosen them (``chosen_rates.json`` in its ``OUT``)
    gives the run its arm's chosen rate, as the sweep trained it; before the choice, the placeholder."""
    sweep, name = preset_parts(preset)
    loaded = load_sweep(sweep)
    runs = {run.name: run for run in loaded.runs}
    if name not in runs:
        raise ValueError(f"no run {name!r} in {sweep}; it has: {', '.join(sorted(runs)[:8])}, ...")
    run = runs[name]
    chosen = None if loaded.tuning is None or loaded.out is None else Path(loaded.out) / "chosen_rates.json"
    if chosen is not None and chosen.exists():
        tuned, _ = with_chosen_rates([run], json.loads(chosen.read_text()))  # empty where the arm has no rate yet
        run = tuned[0] if tuned else run
    return run.argv()


def resume_config(directory, pairs):
    """The RunConfig in ``directory/config.json`` with ``pairs`` (``--steps 2000 ...``) applied.

    Raises:
        ValueError: ``directory`` has no ``config.json``; an option that is unknown or that a
            resume may not change (not in ``RESUME_OVERRIDES``).
    """
    if not (Path(directory) / "config.json").exists():
        raise ValueError(f"cannot resume {directory}: it has no config.json")
    config = recorded_config(directory)
    options = parse_options(config.train.model, config.train.task, pairs)
    allowed = ", ".join("--" + n.replace("_", "-") for n in RESUME_OVERRIDES)
    for name in options:
        if name not in RESUME_OVERRIDES:
            known = name in option_fields(config.train.model, config.train.task)
            raise ValueError(f"{'a resume cannot change' if known else 'unknown option'} '--{name.replace('_', '-')}'"
                             f" (a resume may change only {allowed})")
    return dataclasses.replace(config, train=dataclasses.replace(config.train, **options))


def main(argv=None, prog=None):
    """Train, resume or run a preset from the command line (``python -m experiments.train --help``).

    python -m experiments.train --model group_rnn --dataset ptb_char --group O --n 16 --steps 2000
        python -m experiments.train --model mlstm --task recall --vocab-size 48 --length 64 --read ns
        python -m experiments.train --resume runs/my-run [--steps 4000]
        python -m experiments.train --preset charlm-ptb/rnn-U-seed0 --steps 100   # one run of a preset

    Models: the keys of ``experiments.models.MODEL_CONFIGS``; tasks: ``experiments.tasks.task_classes()``
    (``lm``, the default, language modelling on ``--dataset``; ``recall``, noisy in-context recall).
    Every ``--key value`` (or ``--key=value``; ``--flag``/``--no-flag`` for booleans; ``1e3`` for
    integers) sets a field of ``TrainConfig`` (``--lr 1e-3``), of the task's config
    (``--dataset ptb_char``, ``--length 64``) or of the model's config (``--n 16``); the three share no
    field name, and ``--model M [--task T] --help`` lists them all (``build_parser``). ``--params N``
    sizes the model to N parameters (``sized_model``; the sizes it chose are in ``config.json``). Every refusal of
    the command line comes before any work, as one argparse-style line (``prog``: the command it names,
    for a wrapper's own) and exit code 2. ``--preset SWEEP/RUN`` takes model, task and options
    from run RUN of a sweep (``experiments.sweeps``), at its arm's chosen rate where the sweep has
    chosen one (``preset_argv``); further pairs override them.

    One loop for every task (``experiments.training.loop``): AdamW on Euclidean parameters and
    RiemannianAdam on group-valued ones (``geoopt.ManifoldParameter``), a group RNN's input and state
    maps at their n-aware rates unless ``--map-lr plain``, one schedule (linear warm-up, then constant
    or cosine to 0), the gradient norm clipped to ``clip`` (``none``: not clipped), an evaluation of the
    task's validation split every ``eval_every`` steps. What the run directory holds, and how a resume
    continues it: experiments/README.md, "The run directory". Progress goes to stderr: a bar on a
    terminal, otherwise one plain line per evaluation.
    """
    argv = sys.argv[1:] if argv is None else argv
    argv = argv[1:] if argv[:1] == ["--"] else argv  # torchrun ... -m experiments.train -- ARGS
    try:
        config, directory, argv = configure(argv)
    except (ValueError, TypeError, OSError) as error:  # every refusal, before any work (missing data included)
        parser = build_parser(options=False)
        parser.prog = prog or parser.prog
        refuse(parser, error)
    final = run(config, directory, argv)
    if distributed.is_writer():  # under torchrun: once
        print(json.dumps(final))
    return 0


def configure(argv):
    """``(config, directory, argv to record)`` of a command line (``main``); ``--help`` exits here.

    Raises:
        ValueError: an unknown option, a value of the wrong type or one a config refuses (led by
            the options it names, ``cli.name_options``), a directory that holds a run already.
    """
    args, rest = build_parser(options=False).parse_known_args(argv)
    default_directory = None
    if args.preset is not None:
        if args.model or args.resume:
            raise OptionError("--preset replaces --model and --task, and cannot resume")
        argv = [*preset_argv(args.preset), *rest, *([] if args.task is None else ["--task", args.task]),
                *([] if args.run_dir is None else ["--run-dir", str(args.run_dir)]),
                *([] if args.params is None else ["--params", str(args.params)])]
        default_directory = preset_run_dir(args.preset)
        args, rest = build_parser(options=False).parse_known_args(argv)
    if args.resume is not None:
        if args.model or args.task or args.run_dir or args.params:
            raise OptionError("--resume DIR takes the run's model, task, size and directory from DIR")
        if "-h" in rest or "--help" in rest:
            saved = recorded_config(args.resume)
            build_parser(saved.train.model, saved.train.task).parse_args(["--help"])
        directory = args.resume
        config = resume_config(directory, rest)
        if not (directory / "checkpoint.pt").exists() and finished_record(directory, config.train.steps) is None:
            raise OptionError(f"cannot resume {directory}: it has no checkpoint.pt to continue from"
                              + ("" if not (directory / "final.json").exists() else
                                 f" past the step its final.json records; train {config.train.steps} steps "
                                 "in another --run-dir"))
        return config, directory, argv
    task = args.task or "lm"
    if args.model is None:
        if "-h" in rest or "--help" in rest:
            build_parser(task=task).parse_args(["--help"])
        raise OptionError("--model is required (or --resume DIR, or --preset SWEEP/RUN)")
    options = parse_options(args.model, task, rest)
    try:
        config = build_config(args.model, task, options, args.params)
    except (ValueError, TypeError) as error:
        raise OptionError(name_options(str(error), options)) from error
    check_memory(config)
    directory = args.run_dir or default_directory or Path("runs") / f"{args.model}-{task}-seed{config.train.seed}"
    if (directory / "checkpoint.pt").exists() or (directory / "final.json").exists():
        raise OptionError(f"{directory} already holds a run; continue it with --resume {directory}, or choose "
                          "another directory with --run-dir")
    return config, directory, argv


if __name__ == "__main__":
    raise SystemExit(main())
