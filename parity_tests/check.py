"""Parity check CLI: ``python -m parity_tests.check --model group_rnn --group G --n N --seed S``
or ``python -m parity_tests.check --model mlstm --read plain|ns|polar [--ns-steps k] [--vocab V] [--length L]``.

Prints one JSON object (max errors per quantity, tolerances, ``"pass": true|false``) and exits
with status 1 when the check fails (2 on an invalid configuration).
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings

from reference.config import GROUP_NAMES, MIXINGS, MLSTM_READS, NS_COEFFICIENTS, READOUTS, GroupRNNConfig, MLSTMConfig


def build_parser():
    parser = argparse.ArgumentParser(prog="python -m parity_tests.check", description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=["group_rnn", "mlstm"], default="group_rnn")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dtype", choices=["float32", "float64"], default="float64")
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--length", type=int, default=8)
    parser.add_argument("--vocab", type=int, default=None, help="vocabulary (default 13 for group_rnn, 80 for mlstm)")
    parser.add_argument("--device", default="cpu")
    rnn = parser.add_argument_group("group_rnn")
    rnn.add_argument("--group", choices=GROUP_NAMES)
    rnn.add_argument("--n", type=int)
    rnn.add_argument("--block", type=int, default=None, help="block size of BO (default 2)")
    rnn.add_argument("--embedding-dim", type=int, default=16)
    rnn.add_argument("--readout", choices=READOUTS, default="linear")
    rnn.add_argument("--recurrent", action=argparse.BooleanOptionalAction, default=True)
    rnn.add_argument("--reproject-every", type=int, default=None)
    rnn.add_argument("--mixing", choices=MIXINGS, default="none")
    rnn.add_argument("--mixing-rank", type=int, default=None)
    mlstm = parser.add_argument_group("mlstm")
    mlstm.add_argument("--read", choices=MLSTM_READS, default="plain")
    mlstm.add_argument("--ns-steps", type=int, default=5)
    mlstm.add_argument("--ns-coeffs", choices=tuple(NS_COEFFICIENTS), default="cubic")
    return parser


def build_config(args):
    """The model config the arguments describe; raises ValueError/TypeError on invalid ones."""
    if args.batch < 1 or args.length < 1:
        raise ValueError(f"batch and length must be positive, got {args.batch} and {args.length}")
    if args.model == "mlstm":
        return MLSTMConfig(vocab_size=80 if args.vocab is None else args.vocab, read=args.read,
                           ns_steps=args.ns_steps, ns_coeffs=args.ns_coeffs)
    if args.group is None or args.n is None:
        raise ValueError("--model group_rnn needs --group and --n")
    return GroupRNNConfig(
        vocab_size=13 if args.vocab is None else args.vocab, group=args.group, n=args.n, block=args.block,
        embedding_dim=args.embedding_dim, readout=args.readout, recurrent=args.recurrent,
        reproject_every=args.reproject_every, mixing=args.mixing, mixing_rank=args.mixing_rank)


def main(argv=None):
    args = build_parser().parse_args(argv)
    try:
        config = build_config(args)
    except (TypeError, ValueError) as error:
        print(json.dumps({"error": str(error), "pass": False}))
        return 2
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*torch.jit.script.*is deprecated")
        from parity_tests import harness, mlstm_harness
    parity = mlstm_harness.mlstm_parity if args.model == "mlstm" else harness.group_rnn_parity
    report = parity(config, seed=args.seed, dtype=args.dtype, batch=args.batch, length=args.length,
                    device=args.device)
    print(json.dumps(report, indent=2))
    return 0 if report["pass"] else 1


if __name__ == "__main__":
    sys.exit(main())
