"""Parity check CLI: one configuration of a model in torch against the NumPy reference, outputs
and gradients, within the tolerances of parity_tests/tolerances.py.

    python -m parity_tests.check --model group_rnn --group G --n N --seed S [--update-bound 0.5 ...]
    python -m parity_tests.check --model group_transformer --attention similarity --num-layers 2 --group U --n 4
    python -m parity_tests.check --model mlstm --read ns --ns-steps 3 [--vocab-size 96] [--length 5]
    python -m parity_tests.check --config runs/my-run/config.json [--dtype float32]   # a run's own model

Every field of the model's config is an option (generated from the dataclass, as in
``experiments.train``; ``--model M --help`` lists them), at the config's default, but for
``--vocab-size`` (13, or 80 for the mLSTM). ``--config`` takes a run's ``config.json`` (or its
directory): its model and every field of it; options given beside it override those fields.
Prints one JSON object (max errors per quantity, tolerances, ``"pass": true|false``) and exits
with status 1 when the check fails; 2 on an invalid configuration (a JSON object with its
``error``) or command line (argparse's one line on stderr).
"""

from __future__ import annotations

import dataclasses
import json
import sys
import warnings
from pathlib import Path

from experiments.cli import OptionError, OptionParser, add_config_options, refuse
from reference.config import GroupRNNConfig, GroupTransformerConfig, MLSTMConfig

MODELS = {"group_rnn": GroupRNNConfig, "group_transformer": GroupTransformerConfig, "mlstm": MLSTMConfig}
VOCAB_SIZES = {"group_rnn": 13, "group_transformer": 13, "mlstm": 80}  # the check's own default vocabulary
RUN_OPTIONS = ("model", "config", "seed", "dtype", "batch", "length", "device")


def build_parser(model="group_rnn", options=True):
    """The check's own options and, unless ``options`` is false, every field of ``model``'s config."""
    parser = OptionParser(prog="python -m parity_tests.check", description=__doc__.split("\n\n")[0],
                          add_help=options, epilog=f"Each model has the options of its config: --model M --help "
                                                   f"lists them (M one of {', '.join(MODELS)}).")
    check = parser.add_argument_group("the check")
    check.add_argument("--model", choices=tuple(MODELS), default=None,
                       help="the model to check (default: --config's, else group_rnn)")
    check.add_argument("--config", type=Path, default=None,
                       help="a run's config.json, or its directory: check the model it trains")
    check.add_argument("--seed", type=int, default=0, help="seeds the parameters and the inputs (default 0)")
    check.add_argument("--dtype", choices=["float32", "float64"], default="float64",
                       help="the torch model's precision (default float64)")
    check.add_argument("--batch", type=int, default=2, help="sequences of the input batch (default 2)")
    check.add_argument("--length", type=int, default=8, help="tokens per sequence (default 8)")
    check.add_argument("--device", default="cpu", help="the torch model's device (default cpu)")
    check.add_argument("--vocab-size", type=int, default=None,
                       help="the vocabulary (default: --config's, else 13; 80 for mlstm)")
    if options:
        config_class = MODELS[model]
        add_config_options(parser, config_class, f"model {model} ({config_class.__name__})", excluded=("vocab_size",))
    return parser


def saved_model(path):
    """``(model, {field: value})`` of the run whose ``config.json`` is ``path`` (or is in it)."""
    path = path / "config.json" if path.is_dir() else path
    if not path.is_file():
        raise OptionError(f"--config {path}: no such file")
    try:
        record = json.loads(path.read_text())
        model, fields = record["train"]["model"], record["model"]
    except (json.JSONDecodeError, KeyError, TypeError) as error:
        raise OptionError(f"--config {path}: not a run's config.json ({error})") from None
    if model not in MODELS:
        raise OptionError(f"--config {path}: its model {model!r} has no reference twin to check against "
                         f"(parity_tests.check takes {', '.join(MODELS)})")
    return model, fields


def foreign_options(argv, model):
    """``"; --x is an option of --model M"`` for each option of ``argv`` that another model's config has."""
    own = {field.name for field in dataclasses.fields(MODELS[model])}
    notes = []
    for option in dict.fromkeys(word.split("=")[0] for word in argv if word.startswith("--")):
        name = option[2:].replace("-", "_").removeprefix("no_")
        owners = [other for other, config_class in MODELS.items()
                  if name not in own and name in {field.name for field in dataclasses.fields(config_class)}]
        if owners:
            notes.append(f"{option} is an option of --model {' and '.join(owners)}, not of {model}")
    return "".join(f"; {note}" for note in notes)


def configure(argv):
    """``(model config, check options)`` of a command line; ``--help`` exits here.

    Raises:
        OptionError: an unknown option or value, a ``--config`` that is not a run's of a model with a
            reference twin.
        ValueError, TypeError: a configuration its dataclass refuses.
    """
    args, _ = build_parser(options=False).parse_known_args(argv)
    model, fields = args.model, {}
    if args.config is not None:
        model, fields = saved_model(args.config)
        if args.model not in (None, model):
            raise OptionError(f"--model {args.model}, but the run of --config {args.config} trains {model}")
    model = model or "group_rnn"
    try:
        namespace = vars(build_parser(model).parse_args(argv))
    except OptionError as error:
        raise OptionError(f"{error}{foreign_options(argv, model)}") from None
    if namespace["batch"] < 1 or namespace["length"] < 1:
        raise OptionError(f"--batch and --length must be positive, got {namespace['batch']} and {namespace['length']}")
    given = {name: value for name, value in namespace.items() if name not in RUN_OPTIONS}
    if given["vocab_size"] is None:  # not given: the run's, else the check's own default
        given["vocab_size"] = fields.get("vocab_size", VOCAB_SIZES[model])
    config = MODELS[model](**{**fields, **given})
    return config, {name: namespace[name] for name in ("seed", "dtype", "batch", "length", "device")}


def main(argv=None):
    try:
        config, options = configure(sys.argv[1:] if argv is None else argv)
    except OptionError as error:
        refuse(build_parser(options=False), error)
    except (TypeError, ValueError) as error:
        print(json.dumps({"error": " ".join(str(error).split()), "pass": False}))
        return 2
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*torch.jit.script.*is deprecated")
        from parity_tests import harness
    report = harness.parity(config, **options)
    print(json.dumps(report, indent=2))
    return 0 if report["pass"] else 1


if __name__ == "__main__":
    sys.exit(main())
