"""``make demo``: train the O(n) group-state RNN on Penn Treebank characters for a few minutes.

Prints the validation bits per character before and after training, saves the run (config,
curve, results) as JSON under ``runs/demo/``, and runs the parity check for the configuration.

    python -m experiments.demo [--minutes 3] [--n 16] [--seed 0]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import math
import time
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from experiments.data.ptb import ptb_char
from experiments.lm import bits_per_token, random_windows
from manifold_impl.group_rnn import GroupRNN
from manifold_impl.losses import cross_entropy
from manifold_impl.optim import RiemannianAdam
from parity_tests.harness import group_rnn_parity
from reference.config import GroupRNNConfig

log = logging.getLogger("groupstate.demo")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(prog="python -m experiments.demo", description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=3.0, help="training time budget")
    parser.add_argument("--group", default="O")
    parser.add_argument("--n", type=int, default=16)
    parser.add_argument("--embedding-dim", type=int, default=32)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--length", type=int, default=64)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--clip", type=float, default=1.0)
    parser.add_argument("--valid-tokens", type=int, default=40_000, help="validation prefix used for bpc")
    parser.add_argument("--eval-every", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path("runs/demo"))
    args = parser.parse_args(argv)
    if args.minutes <= 0 or args.batch < 1 or args.length < 1 or args.valid_tokens <= args.length:
        parser.error("--minutes, --batch, --length must be positive and --valid-tokens > --length")
    return args


def main(argv=None):
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    torch.manual_seed(args.seed)
    vocabulary, streams = ptb_char()
    valid = streams["valid"][: args.valid_tokens]
    config = GroupRNNConfig(vocab_size=len(vocabulary), group=args.group, n=args.n,
                            embedding_dim=args.embedding_dim)
    model = GroupRNN(config, generator=torch.Generator().manual_seed(args.seed))
    parameters = sum(p.numel() * (2 if p.is_complex() else 1) for p in model.parameters())
    log.info("Penn Treebank characters: %d symbols, %d training tokens", len(vocabulary), len(streams["train"]))
    log.info("model: %s(%d) group-state RNN, %d real parameters", config.group, config.n, parameters)

    untrained = bits_per_token(model, valid, args.length)
    log.info("validation bpc before training: %.3f (uniform: %.3f)", untrained, math.log2(len(vocabulary)))
    optimizer = RiemannianAdam(model.parameters(), lr=args.lr)
    rng = np.random.default_rng(args.seed)
    curve, step, start = [], 0, time.perf_counter()
    deadline = start + 60 * args.minutes
    with tqdm(desc="training", unit="step", total=None) as bar:
        while time.perf_counter() < deadline:
            inputs, targets = random_windows(streams["train"], args.batch, args.length, rng)
            logits, _ = model(inputs)
            loss = cross_entropy(logits, targets)
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
            optimizer.step()
            step += 1
            elapsed = time.perf_counter() - start
            bar.update()
            bar.set_postfix(bpc=f"{loss.item() / math.log(2):.3f}",
                            tok_s=f"{step * args.batch * args.length / elapsed:.0f}")
            if step % args.eval_every == 0:
                curve.append({"step": step, "seconds": elapsed, "train_bpc": loss.item() / math.log(2),
                              "valid_bpc": bits_per_token(model, valid, args.length)})
    elapsed = time.perf_counter() - start
    trained = bits_per_token(model, valid, args.length)
    drift = max((p.detach().mH @ p.detach() - torch.eye(config.n)).abs().max().item()
                for p in (model.cell.initial_state,))
    log.info("validation bpc: %.3f untrained -> %.3f after %d steps (%.1f min, %.0f tokens/s)",
             untrained, trained, step, elapsed / 60, step * args.batch * args.length / elapsed)

    parity = group_rnn_parity(config, seed=args.seed, dtype="float32")
    log.info("parity check for this configuration (float32 vs the reference): %s",
             "pass" if parity["pass"] else "FAIL")

    args.out.mkdir(parents=True, exist_ok=True)
    record = {"config": dataclasses.asdict(config), "args": {k: str(v) for k, v in vars(args).items()},
              "parameters": parameters, "steps": step, "seconds": elapsed,
              "valid_bpc_untrained": untrained, "valid_bpc": trained, "initial_state_drift": drift,
              "curve": curve, "parity_pass": parity["pass"]}
    (args.out / "result.json").write_text(json.dumps(record, indent=2))
    log.info("saved %s", args.out / "result.json")
    return 0 if parity["pass"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
