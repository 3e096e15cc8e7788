"""A training step replayed from CUDA graphs (``train --cuda-graphs``): ``CapturedStep``, and the two
things it does to the GPU, ``on_side_stream`` (the eager warm-up) and ``capture``; the device check
(``experiments.bench.device_check``) captures its optimizer steps with the same two.
"""

from __future__ import annotations

import torch

from experiments.training.optim import clip_and_step
from manifold_impl.validation import check_tokens

CAPTURE_WARMUP = 3  # eager steps before --cuda-graphs captures the step (torch's advice for a whole network)


def on_side_stream(function):
    """Run ``function`` on a new CUDA stream that waits for, and is waited for by, the current one."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        function()
    torch.cuda.current_stream().wait_stream(stream)


def capture(function):
    """Capture the kernels ``function`` launches in a CUDA graph (running none); its replay."""
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        function()
    return graph.replay


class CapturedStep:
    """A training step of ``model``, replayed from CUDA graphs after ``warmup`` eager steps: the
    ``loss(inputs, targets)`` (``Run.training_loss``), its backward, clipping to ``clip`` and the
    steps of ``optimizers`` (capturable ``Optimizers``). ``Run.backward`` and ``Run.update`` under
    ``train --cuda-graphs``.

    A group RNN's eager step launches about a hundred small kernels per time step (some 13,000 for O(24)
    at T = 128); on a GPU the host's cost of launching them, not their arithmetic, sets the pace. A
    CUDA graph records the launches once and replays them all with one. The step is captured as two
    graphs, replayed in turn:

    - forward: the loss of the batch in the static inputs, and its backward into gradients whose
      memory the graph owns (the same tensors at every replay);
    - update: gradient clipping and both optimizers' step, built capturable (``Optimizers``: their
      step counts and rates live on the device; the schedule fills the rates between replays).

    Between the two the loss is read, as an eager step reads it, so a non-finite loss stops the run
    before its update. The first ``warmup`` steps run eagerly on a side stream: they create the
    optimizers' state and the groups' device caches, which a capture cannot. The next step is captured
    and replayed, and every later one replays. Every batch must have the shape of the first; the model's
    checks (token ids, parameters on their groups) are device assertions inside the graphs.
    """

    def __init__(self, model, loss, optimizers, clip, warmup=CAPTURE_WARMUP):
        self.model, self.loss_of, self.optimizers, self.clip, self.warmup = model, loss, optimizers, clip, warmup
        self.eager_steps = 0
        self.inputs = self.targets = self.loss = None  # the static tensors the graphs read and write
        self._forward = self._update = None  # the graphs' replays, once captured

    def backward(self, inputs, targets):
        """Copy the batch (ids on the host, checked there) into the static inputs and run the forward
        and backward pass: eagerly during the warm-up, then from the forward graph; the loss, read."""
        self._load(inputs, targets)
        if self._forward is None and self.eager_steps == self.warmup:
            self.optimizers.zero_grad()  # the captured backward then allocates the gradients in the graph's memory
            self._forward = capture(self._forward_and_backward)
        if self._forward is not None:
            self._forward()
        else:
            on_side_stream(self._forward_and_backward)
        return self.loss.item()

    def update(self):
        """Clip and step the optimizers (eagerly during the warm-up, then from the update graph), and
        step the schedules, which fill the rates the update graph reads."""
        if self._update is None and self.eager_steps == self.warmup:
            self._update = capture(self._clip_and_step)
        if self._update is not None:
            self._update()
        else:
            on_side_stream(self._clip_and_step)
            self.eager_steps += 1
        self.optimizers.step_schedules()

    def _load(self, inputs, targets):
        """Check the ids on the host and copy the batch into the static inputs without blocking.

        Raises:
            ValueError: the batch has another shape than the first one (the graphs replay one shape).
        """
        check_tokens(inputs, self.model.config.vocab_size)
        device = next(self.model.parameters()).device
        if self.inputs is None:
            self.inputs = torch.empty(inputs.shape, dtype=inputs.dtype, device=device)
            self.targets = torch.empty(targets.shape, dtype=targets.dtype, device=device)
        for static, batch in ((self.inputs, inputs), (self.targets, targets)):
            if batch.shape != static.shape:
                raise ValueError(f"--cuda-graphs replays the shapes of the first batch, {tuple(static.shape)}, and "
                                 f"the task gave {tuple(batch.shape)}: train this task without --cuda-graphs")
            static.copy_(batch.pin_memory() if device.type == "cuda" else batch, non_blocking=True)

    def _forward_and_backward(self):
        self.optimizers.zero_grad()  # the backward writes new gradients (in a capture: the graph's)
        self.loss = self.loss_of(self.inputs, self.targets)
        self.loss.backward()

    def _clip_and_step(self):
        clip_and_step(self.model, self.optimizers, self.clip)
