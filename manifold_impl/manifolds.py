"""geoopt manifolds for every group of the zoo (torch only; no reference twin).

geoopt has no SO(n), no unitary, special unitary or torus manifold. ``GroupManifold`` adapts any
``manifold_impl.groups.Group`` so that group-valued parameters are ``geoopt.ManifoldParameter``s
trained by ``geoopt.optim.RiemannianAdam``:

    projx(x)        = nearest(x)
    proju(x, u)     = egrad2rgrad(x, u) = x Π(x^{-1} u)
    retr(x, u)      = expmap(x, u) = refine(x exp(Π(x^{-1} u)))   (refine: one polar Newton step,
                                                                   the identity on G; it keeps
                                                                   float32 drift from accumulating)
    inner(x, u, v)  = Re tr(u^H v)                      (real, also for complex groups)
    component_inner = Re(conj(u) ⊙ v)                   (elementwise, real)
    transp(x, y, v) = y Π(x^{-1} v)                     (left translation of the algebra part)

The reference optimizer (reference/optim.py) writes the same math out. ``GroupModule`` is the
base of every module holding group-valued parameters: it keeps them complex through casts, and
its models check once per forward call that no optimizer has moved them off their groups.
"""

from __future__ import annotations

import geoopt
import torch

from manifold_impl import validation
from manifold_impl.groups import Group


class GroupManifold(geoopt.Manifold):
    """A ``geoopt.Manifold`` whose points are ``[..., n, n]`` elements of ``group``."""

    ndim = 2
    reversible = False

    def __init__(self, group: Group):
        super().__init__()
        self.group = group
        self.name = f"Group({group!r})"

    def extra_repr(self):
        return repr(self.group)

    def _check_shape(self, shape, name):
        n = self.group.n
        ok = len(shape) >= 2 and tuple(shape[-2:]) == (n, n)
        return ok, None if ok else f"'{name}' on {self.name} needs shape [..., {n}, {n}], got {tuple(shape)}"

    def _check_point_on_manifold(self, x, *, atol=1e-5, rtol=1e-5):
        return self.group.is_member(x, atol=atol, explain=True)

    def _check_vector_on_tangent(self, x, u, *, atol=1e-5, rtol=1e-5):
        a = self.group.mul(self.group.inv(x), u)
        err = (a - self.group.proj(a)).abs().max().item()
        ok = err <= atol
        return ok, None if ok else f"x^{{-1}} u is {err:.3g} away from the Lie algebra (atol {atol:.3g})"

    def projx(self, x):
        return self.group.nearest(x)

    def proju(self, x, u):
        return self.group.proj_tangent(x, u)

    egrad2rgrad = proju

    def retr(self, x, u):
        return self.group.refine(self.group.retr(x, u))

    expmap = retr

    def inner(self, x, u, v=None, *, keepdim=False):
        v = u if v is None else v
        value = self.group.inner(u, v)
        return value[..., None, None] if keepdim else value

    def component_inner(self, x, u, v=None):
        v = u if v is None else v
        return (u.conj() * v).real

    def transp(self, x, y, v):
        return self.group.mul(y, self.group.proj(self.group.mul(self.group.inv(x), v)))

    def random(self, *size, dtype=None, device=None, generator=None, **kwargs):
        """Haar random points of shape ``size`` = (..., n, n), drawn from ``generator`` or, without
        one, from torch's global generator (advanced, never reseeded)."""
        self._assert_check_shape(size, "x")
        return geoopt.ManifoldTensor(
            self.group.random(size[:-2], generator=generator, dtype=dtype, device=device), manifold=self)

    def origin(self, *size, dtype=None, device=None, seed=42):
        """Identity matrices of shape ``size``."""
        self._assert_check_shape(size, "x")
        return geoopt.ManifoldTensor(self.group.identity(size[:-2], dtype=dtype, device=device), manifold=self)


PRECISIONS = (torch.float32, torch.float64)  # the real precisions the group-state models compute in


def check_precision(dtype, owner):
    """Refuse a real precision other than ``PRECISIONS`` (None: torch's default dtype) for ``owner``."""
    real = torch.get_default_dtype() if dtype is None else dtype
    if real not in PRECISIONS:
        raise TypeError(f"{owner} computes in torch.float32 or torch.float64 (complex groups in the matching complex "
                        f"dtype), got {real}; for mixed precision run it under torch.autocast instead of casting it")


def _is_member(param):
    """Whether a group-valued parameter is on its group (a tensor without data, on meta, counts as on it)."""
    return param.device.type == "meta" or param.manifold.group.is_member(param.detach())


class GroupModule(torch.nn.Module):
    """An ``nn.Module`` whose casts keep complex parameters complex, and which can check that its
    group-valued parameters are still on their groups (``_check_on_groups``).

    ``.double()``, ``.float()``, ``.to(dtype)``, ``.to(device)`` and ``.type(...)`` apply torch's
    cast to the real view of a complex tensor, so U's H_0 in complex64 becomes complex128 under
    ``.double()`` and ``.to(torch.float64)`` (plain torch keeps it complex64, resp. drops its
    imaginary part). A group-valued parameter on its group before a cast is on it after: a
    float32 element is a float64 element only to float32 precision, and ``.double()`` moves it
    onto the group in float64 (``nearest``, a change of ~1e-7). A cast to another precision
    (``.half()``, ``.bfloat16()``) or to a complex dtype is refused before anything changes
    (``check_precision``).
    """

    def _apply(self, fn, recurse=True):
        anchor = next(self.parameters(), None)
        probe = fn(torch.zeros((), device=None if anchor is None else anchor.device))
        if probe.is_complex():
            raise TypeError(f"cast {type(self).__name__} with its real precision (e.g. .to(torch.float64)): complex "
                            f"groups follow it, got {probe.dtype}")
        if probe.is_floating_point():
            check_precision(probe.dtype, type(self).__name__)

        def keep_complex(tensor):
            return torch.view_as_complex(fn(torch.view_as_real(tensor))) if tensor.is_complex() else fn(tensor)
        on_groups = {name for name, param in self._group_parameters(recurse) if _is_member(param)}
        super()._apply(keep_complex, recurse)
        with torch.no_grad():
            for name, param in self._group_parameters(recurse):
                if name in on_groups and not _is_member(param):
                    param.copy_(param.manifold.group.nearest(param))
        return self

    def _group_parameters(self, recurse=True):
        return [(name, param) for name, param in self.named_parameters(recurse=recurse)
                if isinstance(param, geoopt.ManifoldParameter)]

    def _check_on_groups(self):
        """Raise a ValueError naming the first group-valued parameter that is off its group.

        Only geoopt's Riemannian optimizers keep a ``ManifoldParameter`` on its group; any other
        torch optimizer (AdamW, SGD, ...) steps it along the ambient gradient and off the group.
        The models call this once per forward call, never inside the recurrence: one host read for
        all parameters, and the explanation only when one is off. Where the call is traced
        (``torch.compile``, or a CUDA graph captured), the check is an assertion on the device (no
        host read, no name in the error).
        """
        params = self._group_parameters()
        if not params:
            return
        off = torch.stack([param.manifold.group._violation(param) for _, param in params]).any()
        if validation._traced(off):  # an assertion in the graph, no host read
            torch._assert_async(~off, "a group-valued parameter is off its group; call the model uncompiled to see which")
            return
        if not off:
            return
        for name, param in params:
            group = param.manifold.group
            ok, reason = group.is_member(param.detach(), explain=True)
            if not ok:
                raise ValueError(
                    f"parameter {name!r} is off {group!r} ({reason}): an optimizer that is not Riemannian (AdamW, "
                    f"SGD, ...) moves it along the ambient gradient. Train with manifold_impl.optim.RiemannianAdam, "
                    f"or put it back after each step: with torch.no_grad(): param.copy_(param.manifold.group.nearest(param)) "
                    f"for every geoopt.ManifoldParameter param of the model")


def group_parameter(value: torch.Tensor, group: Group) -> geoopt.ManifoldParameter:
    """A trainable group-valued parameter on ``GroupManifold(group)``."""
    return geoopt.ManifoldParameter(value, manifold=GroupManifold(group))


def check_group_state_dict(module: torch.nn.Module, state_dict, prefix=""):
    """Raise ValueError if an entry of ``state_dict`` for a group-valued parameter is off its group.

    Run before ``load_state_dict`` copies anything.
    """
    for name, param in module.named_parameters():
        key = prefix + name
        if isinstance(param, geoopt.ManifoldParameter) and key in state_dict:
            value = torch.as_tensor(state_dict[key])
            ok, reason = param.manifold.group.is_member(value, explain=True)
            if not ok:
                raise ValueError(f"parameter {key!r} is not on {param.manifold.group!r}: {reason}")
