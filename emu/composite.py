"""Operators made of others, as a dispatch mode sees them inside ``torch.inference_mode()``.

Outside inference mode a dispatch mode sees the parts of an operator that has a
CompositeImplicitAutograd kernel (``aten.to.dtype`` reaches it as ``aten._to_copy``).
Where torch excludes autograd (inside ``torch.inference_mode()``) it sees the operator whole,
and such an operator marks its tensor ``Tensor(a)``: only viewed, reading nothing, though it
copies (reads) that tensor whenever its result is no view of it (``.double()``,
``.to(dtype)``, ``.contiguous()`` of a transposed view). The watches ask :func:`copied`
after running such an operator, and treat the tensors it names as read.
"""

from __future__ import annotations

from typing import Any

import torch

#: Operator -> (position, name, False) of the arguments it marks as only viewed, where it is
#: made of others (else empty); asked once per operator.
_VIEWED: dict[Any, tuple[tuple[int, str, bool], ...]] = {}


def viewed_args(func: Any) -> tuple[tuple[int, str, bool], ...]:
    """(position, name, False) of the ``Tensor(a)`` arguments of ``func`` where it has a
    CompositeImplicitAutograd kernel (it may copy them), else ()."""
    known = _VIEWED.get(func)
    if known is None:
        composite = torch._C._dispatch_has_kernel_for_dispatch_key(
            func.name(), "CompositeImplicitAutograd"
        )
        known = _VIEWED[func] = tuple(
            (i, arg.name, False)
            for i, arg in enumerate(func._schema.arguments)
            if composite and arg.alias_info is not None and not arg.alias_info.is_write
        )
    return known


def copied(func: Any, args: tuple, kwargs: dict, result: Any) -> tuple[tuple[int, str, bool], ...]:
    """The :func:`viewed_args` of ``func`` that ``result`` does not share storage with: the
    operator copied, so read, them."""
    viewed = viewed_args(func)
    if not viewed:
        return ()
    outputs = result if isinstance(result, (list, tuple)) else (result,)
    shared = {t.untyped_storage().data_ptr() for t in outputs if isinstance(t, torch.Tensor)}
    found = []
    for i, name, written in viewed:
        value = args[i] if i < len(args) else kwargs.get(name)
        if isinstance(value, torch.Tensor) and value.untyped_storage().data_ptr() not in shared:
            found.append((i, name, written))
    return tuple(found)
