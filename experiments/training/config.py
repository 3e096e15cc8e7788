"""A run's configuration: how to train (``TrainConfig``), the task's and the model's configs together
(``RunConfig``), built from typed options (``build_config``) or sized to a parameter budget
(``sized_model``), checked against the device's memory before any work (``check_memory``), and read
back from a run directory with the model it trained (``recorded_config``, ``load_run_model``).
"""

from __future__ import annotations

import dataclasses
import json
import os
import typing
from dataclasses import dataclass
from pathlib import Path

import torch

from experiments.models import MODEL_CONFIGS, build_model, checkpointed_models
from experiments.params_budget import SEARCHABLE, size_to_budget
from experiments.tasks import task_class
from experiments.training.precision import PRECISIONS
from experiments.training.rundir import load_checkpoint_file
from reference.config import GroupRNNConfig

SCHEDULES = ("constant", "cosine")
MAP_LRS = ("n_aware", "plain")


@dataclass(frozen=True)
class TrainConfig:
    """How to train (model- and task-independent). Validated in ``__post_init__``.

    Attributes:
        model: a key of ``experiments.models.MODEL_CONFIGS``.
        task: a key of ``experiments.tasks.task_classes()``.
        steps: optimizer steps of the run.
        batch: sequences per step.
        lr: the peak learning rate, of AdamW and of RiemannianAdam.
        schedule: ``cosine`` (to 0 at the last step) or ``constant``, after the warm-up.
        warmup: steps of linear warm-up from lr/warmup to lr.
        weight_decay: AdamW's decoupled weight decay (not applied to group-valued parameters).
        clip: the largest gradient norm, or none for no clipping.
        eval_every: steps between evaluations on the validation split.
        checkpoint_every: steps between checkpoints of the run directory.
        seed: seeds the model, the data order and every random draw of the run.
        dtype: the parameters' real precision, float32 or float64.
        device: a torch device (cpu, cuda, cuda:1), or auto for CUDA where the machine has it.
        map_lr: the learning rate of a group RNN's input and state maps: n_aware scales it by
            ``reference.config.map_lr_scales`` (1 at O(16) and below), plain is the paper's single rate.
        compile: none (eager), or the ``torch.compile`` backend (inductor, aot_eager, ...) of each
            training step's forward pass and loss, whose backward is then compiled with it. A group
            RNN's fused recurrence is not traced whole: its per-step functions are compiled
            (``GroupRNNCell.compile_steps``), so compiling takes the same seconds at any sequence
            length. Evaluation stays eager.
        cuda_graphs: replay each training step from CUDA graphs (``CapturedStep``), with
            capturable optimizers: on a CUDA device, without ``compile``, for a task whose batches
            all have one shape. Evaluation stays eager.
        precision: float32, or the autocast of each training step's forward pass: bf16 (any
            device), fp16 (CUDA, with a gradient scaler). The group product, the exponential and
            the state stay float32 (``experiments.training.precision``); needs dtype float32.
            Evaluation runs in float32.
        checkpoint_activations: recompute in the backward pass what a Transformer's layers and the
            mLSTM's chunks compute instead of keeping it (``experiments.models.checkpoint_activations``:
            less memory for longer sequences, about one more forward pass of time). A group RNN
            has ``keep_state_every`` for the same purpose.
    """

    model: str
    task: str = "lm"
    steps: int = 1000
    batch: int = 32
    lr: float = 1e-3
    schedule: str = "cosine"
    warmup: int = 0
    weight_decay: float = 0.0
    clip: float | None = 1.0
    eval_every: int = 200
    checkpoint_every: int = 200
    seed: int = 0
    dtype: str = "float32"
    device: str = "cpu"
    map_lr: str = "n_aware"
    compile: str | None = None
    cuda_graphs: bool = False
    precision: str = "float32"
    checkpoint_activations: bool = False

    def __post_init__(self):
        if self.model not in MODEL_CONFIGS:
            raise ValueError(f"unknown model {self.model!r}; choose one of {sorted(MODEL_CONFIGS)}")
        task_class(self.task)  # refuses an unknown task
        for name in ("steps", "batch", "eval_every", "checkpoint_every"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise ValueError(f"seed must be a non-negative int, got {self.seed!r}")
        if not isinstance(self.warmup, int) or not 0 <= self.warmup < self.steps:
            raise ValueError(f"warmup must be an int in [0, steps), got {self.warmup!r}")
        if not self.lr > 0 or (self.clip is not None and not self.clip > 0) or self.weight_decay < 0:
            raise ValueError("lr and clip must be positive and weight_decay non-negative")
        if self.schedule not in SCHEDULES:
            raise ValueError(f"unknown schedule {self.schedule!r}; choose one of {list(SCHEDULES)}")
        if self.dtype not in ("float32", "float64"):
            raise ValueError(f"dtype must be float32 or float64, got {self.dtype!r}")
        if self.map_lr not in MAP_LRS:
            raise ValueError(f"unknown map_lr {self.map_lr!r}; choose one of {list(MAP_LRS)}")
        backends = torch.compiler.list_backends(exclude_tags=())
        if self.compile is not None and self.compile not in backends:
            raise ValueError(f"unknown compile backend {self.compile!r}; choose one of {backends} or none")
        if not isinstance(self.cuda_graphs, bool):
            raise ValueError(f"cuda_graphs must be true or false, got {self.cuda_graphs!r}")
        if self.cuda_graphs and not (str(self.device).startswith("cuda") or
                                     (self.device == "auto" and torch.cuda.is_available())):
            raise ValueError(f"cuda_graphs captures CUDA graphs and needs a CUDA device (--device cuda), got "
                             f"device {self.device!r}" + (" on a machine without CUDA" if self.device == "auto" else ""))
        if self.cuda_graphs and self.compile is not None:
            raise ValueError("cuda_graphs replays the eager step: choose compile or cuda_graphs, not both")
        if self.precision not in PRECISIONS:
            raise ValueError(f"unknown precision {self.precision!r}; choose one of {list(PRECISIONS)}")
        if self.precision != "float32" and self.dtype != "float32":
            raise ValueError(f"precision {self.precision} autocasts float32 parameters: it needs dtype float32, "
                             f"got {self.dtype}")
        if self.precision == "fp16" and not (str(self.device).startswith("cuda") or
                                             (self.device == "auto" and torch.cuda.is_available())):
            raise ValueError(f"precision fp16 (with a gradient scaler) is for CUDA devices, got device {self.device!r}; "
                             "on the CPU use --precision bf16")
        if not isinstance(self.checkpoint_activations, bool):
            raise ValueError(f"checkpoint_activations must be true or false, got {self.checkpoint_activations!r}")
        if self.checkpoint_activations and self.model not in checkpointed_models():
            raise ValueError(f"checkpoint_activations recomputes the layers of {', '.join(checkpointed_models())}; "
                             f"--model {self.model} has none" + (" (its recurrence keeps fewer states with "
                             "--keep-state-every)" if self.model == "group_rnn" else ""))
        if self.precision != "float32" and self.cuda_graphs:
            raise ValueError(f"cuda_graphs replays a float32 step: choose precision {self.precision} or cuda_graphs, "
                             "not both")


@dataclass(frozen=True)
class RunConfig:
    """Everything that defines a run: the training config, the task's config and the model's config."""

    train: TrainConfig
    task: typing.Any
    model: typing.Any

    def to_json(self):
        return {"train": dataclasses.asdict(self.train), "task": dataclasses.asdict(self.task),
                "model": dataclasses.asdict(self.model)}

    @classmethod
    def from_json(cls, record):
        train = TrainConfig(**{"map_lr": "plain", **record["train"]})  # runs recorded before map_lr were plain
        task, model = task_class(train.task).Config(**record["task"]), MODEL_CONFIGS[train.model](**record["model"])
        return cls(train, task, model)


def _fields(config_class, excluded=()):
    """``{field name: type}`` of a config dataclass (types resolved from its annotations)."""
    hints = typing.get_type_hints(config_class)
    return {f.name: hints[f.name] for f in dataclasses.fields(config_class) if f.name not in excluded}


def option_fields(model, task):
    """``{field: (part, type)}`` over the three configs a run's options may set; a shared name is an error."""
    parts = {"train": _fields(TrainConfig, ("model", "task")), "task": _fields(task_class(task).Config),
             "model": _fields(MODEL_CONFIGS[model], ("vocab_size",))}
    owners = {}
    for part, fields in parts.items():
        for name, kind in fields.items():
            if name in owners:
                raise ValueError(f"field {name!r} is in both the {owners[name][0]} and the {part} config")
            owners[name] = (part, kind)
    return owners


def build_config(model, task, options, params=None):
    """The RunConfig of ``model`` on ``task`` with ``options`` (``{field: value}``, typed), validated;
    with ``params``, the model's free size fields sized to that budget (``sized_model``).

    Raises:
        ValueError: an unknown model, task or option, or a value its config refuses.
    """
    if model not in MODEL_CONFIGS:
        raise ValueError(f"unknown model {model!r}; choose one of {sorted(MODEL_CONFIGS)}")
    owners = option_fields(model, task)
    parts = {"train": {}, "task": {}, "model": {}}
    for name, value in options.items():
        if name not in owners:
            raise ValueError(f"unknown option '--{name.replace('_', '-')}': not a field of TrainConfig, of the "
                             f"{task} task's config or of the {model} config ({sorted(owners)})")
        parts[owners[name][0]][name] = value
    sized = SEARCHABLE.get(MODEL_CONFIGS[model], ()) if params is not None else ()
    required = [field.name for field in dataclasses.fields(MODEL_CONFIGS[model]) if field.name != "vocab_size"
                and field.default is dataclasses.MISSING and field.name not in options and field.name not in sized]
    if required:
        raise ValueError(f"--model {model} needs " + " and ".join(f"--{name.replace('_', '-')}" for name in required))
    train = TrainConfig(model=model, task=task, **parts["train"])
    task_config = task_class(task).Config(**parts["task"])
    vocab_size = task_class(task)(task_config, train.seed).vocab_size
    if params is not None:
        return RunConfig(train, task_config, sized_model(model, vocab_size, parts["model"], params))
    return RunConfig(train, task_config, MODEL_CONFIGS[model](vocab_size=vocab_size, **parts["model"]))


SIZE_PLACEHOLDER = 64  # the value of a required size field before the search sets it (a multiple of any head count)


def sized_model(model, vocab_size, options, params):
    """The config of ``model`` with ``options`` whose free size fields (``params_budget.SEARCHABLE``,
    those ``options`` do not fix) give ``params`` parameters within ±2% (``size_to_budget``)."""
    config_class = MODEL_CONFIGS[model]
    if config_class not in SEARCHABLE:
        sizable = [name for name, cls in MODEL_CONFIGS.items() if cls in SEARCHABLE]
        raise ValueError(f"--params sizes the models {', '.join(sizable)}; size --model {model} with its own options")
    free = tuple(name for name in SEARCHABLE[config_class] if name not in options)
    if not free:
        raise ValueError(f"--params sets {' and '.join('--' + n.replace('_', '-') for n in SEARCHABLE[config_class])} "
                         "itself: give at most one of them with it")
    placeholders = {field.name: SIZE_PLACEHOLDER for field in dataclasses.fields(config_class)
                    if field.name in free and field.default is dataclasses.MISSING}
    template = config_class(vocab_size=vocab_size, **placeholders, **options)
    try:
        return size_to_budget(template, params, free=free)
    except ValueError as error:
        raise ValueError(f"--params {params}: {error}") from error


def step_memory_floor(config, length):
    """A lower bound, in bytes, on the memory of one training step of ``config`` on inputs
    ``[batch, length]``: the logits and their gradient, 2·B·T·V numbers, and a group RNN's kept
    states, B·T·n² numbers (twice for a complex group; 1/k of them with ``keep_state_every = k``)."""
    tokens, model = config.train.batch * length, config.model
    numbers = 2 * tokens * model.vocab_size
    if isinstance(model, GroupRNNConfig):
        numbers += tokens * model.n ** 2 * (2 if model.is_complex else 1) // (model.keep_state_every or 1)
    return numbers * (8 if config.train.dtype == "float64" else 4)


def device_memory(device):
    """The memory of ``device`` in bytes: a CUDA device's, or the machine's RAM for the CPU."""
    device = torch.device(resolve_device(device))
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).total_memory
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def check_memory(config):
    """Refuse, before any work, a run whose step needs more memory than its device has
    (``step_memory_floor`` at the task's ``train_length``, naming the flags that set it)."""
    length = task_class(config.train.task)(config.task, config.train.seed).train_length
    needed, available = step_memory_floor(config, length), device_memory(config.train.device)
    if needed > available:
        raise ValueError(f"--batch {config.train.batch} with training sequences of {length} tokens needs at least "
                         f"{needed / 2**30:.1f} GiB for one step (logits and kept states), more than the "
                         f"{available / 2**30:.1f} GiB of --device {config.train.device}: lower --batch or the task's training length")


def resolve_device(device):
    """``auto`` -> ``cuda`` when available, else ``cpu``; any other device unchanged. A CUDA device
    where torch has none is a ValueError naming ``--device`` (before any work)."""
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if str(device).startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(f"--device {device}: this torch build or machine has no CUDA device "
                         "(torch.cuda.is_available() is False); use --device cpu or --device auto")
    return device


def recorded_config(directory):
    """The RunConfig that ``directory/config.json`` records (a ValueError where there is none)."""
    path = Path(directory) / "config.json"
    if not path.exists():
        raise ValueError(f"{directory} holds no run: it has no config.json")
    return RunConfig.from_json(json.loads(path.read_text()))


def load_run_model(directory, checkpoint="best.pt"):
    """``(RunConfig, model)``: the model of the run in ``directory`` with the parameters of its
    ``checkpoint`` (``best.pt``, the best-validation model, or ``checkpoint.pt``, the last one saved),
    built from its ``config.json`` on the CPU, in eval mode."""
    config = recorded_config(directory)
    model = build_model(config.model)
    model.load_state_dict(load_checkpoint_file(Path(directory) / checkpoint)["model"])
    return config, model.eval()


def command_line(config, directory):
    """The ``experiments.train`` arguments that rebuild ``config``: model, task and every non-default field."""
    argv = ["--model", config.train.model, "--task", config.train.task]
    for part in (config.train, config.task, config.model):
        for field in dataclasses.fields(part):
            value = getattr(part, field.name)
            if field.name not in ("model", "task", "vocab_size") and value != field.default:
                argv += [f"--{field.name.replace('_', '-')}", str(value)]
    return [*argv, "--run-dir", str(directory)]
