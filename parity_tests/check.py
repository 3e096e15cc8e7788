"""Parity check CLI: ``python -m parity_tests.check --model group_rnn --group G --n N --seed S``.

Prints one JSON object (max errors per quantity, tolerances, ``"pass": true|false``) and exits
with status 1 when the check fails (2 on an invalid configuration).
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings

from reference.config import GROUP_NAMES, MIXINGS, READOUTS, GroupRNNConfig


def build_parser():
    parser = argparse.ArgumentParser(prog="python -m parity_tests.check", description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=["group_rnn"], default="group_rnn")
    parser.add_argument("--group", choices=GROUP_NAMES, required=True)
    parser.add_argument("--n", type=int, required=True)
    parser.add_argument("--block", type=int, default=None, help="block size of BO (default 2)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dtype", choices=["float32", "float64"], default="float64")
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--length", type=int, default=8)
    parser.add_argument("--vocab", type=int, default=13)
    parser.add_argument("--embedding-dim", type=int, default=16)
    parser.add_argument("--readout", choices=READOUTS, default="linear")
    parser.add_argument("--recurrent", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--reproject-every", type=int, default=None)
    parser.add_argument("--mixing", choices=MIXINGS, default="none")
    parser.add_argument("--mixing-rank", type=int, default=None)
    parser.add_argument("--device", default="cpu")
    return parser


def main(argv=None):
    args = build_parser().parse_args(argv)
    try:
        config = GroupRNNConfig(
            vocab_size=args.vocab, group=args.group, n=args.n, block=args.block,
            embedding_dim=args.embedding_dim, readout=args.readout, recurrent=args.recurrent,
            reproject_every=args.reproject_every, mixing=args.mixing, mixing_rank=args.mixing_rank)
        if args.batch < 1 or args.length < 1:
            raise ValueError(f"batch and length must be positive, got {args.batch} and {args.length}")
    except (TypeError, ValueError) as error:
        print(json.dumps({"error": str(error), "pass": False}))
        return 2
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*torch.jit.script.*is deprecated")
        from parity_tests.harness import group_rnn_parity
    report = group_rnn_parity(config, seed=args.seed, dtype=args.dtype, batch=args.batch,
                              length=args.length, device=args.device)
    print(json.dumps(report, indent=2))
    return 0 if report["pass"] else 1


if __name__ == "__main__":
    sys.exit(main())
