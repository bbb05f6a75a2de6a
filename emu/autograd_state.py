"""Autograd's per-thread state, which a greenlet runner takes with it when it hands on.

Greenlet runners share one OS thread, and autograd keeps these per thread: its
switches (multithreaded backward, forward-mode AD, view replay, gradient layout
enforcement, the graph execution group, where this torch has them), the stack
of default saved-tensor hooks (``torch.autograd.graph.saved_tensors_hooks``)
and whether those hooks are disabled (``disable_saved_tensors_hooks``). A
runner that blocks inside ``saved_tensors_hooks`` would otherwise leave its
hooks to every runner that runs meanwhile, and find theirs when it resumes. The
thread runners' pool reads them too (``READERS``, with :mod:`.runners`' own): a thread
is reused only while these are a new thread's. A torch without ``_top_saved_tensors_default_hooks``
(before 2.8) does not show the hook stack: there the hooks, and whether they are
disabled, stay with the thread.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable
from typing import Any, NamedTuple

import torch

from hccl_py.server.threads import read_in_a_new_thread

_C = torch._C
_HOOKS = _C._autograd
#: (getter, setter) of each per-thread autograd switch this torch has.
_SWITCHES = tuple(
    (getattr(_C, get), getattr(_C, put))
    for get, put in (
        ("_is_multithreading_enabled", "_set_multithreading_enabled"),
        ("_is_fwd_grad_enabled", "_set_fwd_grad_enabled"),
        ("_is_view_replay_enabled", "_set_view_replay_enabled"),
        ("_is_grad_layout_enforcement_enabled", "_set_grad_layout_enforcement_enabled"),
        ("_get_graph_exec_group", "_set_graph_exec_group"),
    )
    if hasattr(_C, get) and hasattr(_C, put)
)


def _top_reader() -> Callable[[], tuple[Callable, Callable] | None] | None:
    """The top of the calling thread's saved-tensor hook stack, in this torch's spelling;
    None where this torch cannot show it."""
    top = getattr(_HOOKS, "_top_saved_tensors_default_hooks", None)
    if top is None:
        return None
    try:
        top(True)
    except TypeError:  # the form without ignore_is_tracing
        return top
    return functools.partial(top, True)  # (not a lambda: read at every hand-off)


_top_hooks = _top_reader()


class AutogradState(NamedTuple):
    """One runner's autograd state, as :func:`take` found it."""

    #: The values of :data:`_SWITCHES`.
    switches: tuple[Any, ...]
    #: Default saved-tensor hooks, (pack, unpack) pairs, the outermost first.
    hooks: list[tuple[Callable, Callable]]
    #: The error message while saved-tensor hooks are disabled; None while they are enabled.
    hooks_disabled: str | None


#: What :func:`_values` reads: the switches, then where this torch shows them the top of the
#: saved-tensor hook stack (None: no hooks) and whether the hooks are enabled.
READERS = tuple(get for get, _ in _SWITCHES) + (
    () if _top_hooks is None else (_top_hooks, _HOOKS._saved_tensors_hooks_is_enabled)
)
#: Calls each reader from C (:func:`_values` is asked at every hand-off).
CALL = operator.methodcaller("__call__")


def _values() -> tuple[Any, ...]:
    return tuple(map(CALL, READERS))


#: A new thread's :func:`_values`.
PLAIN = read_in_a_new_thread(_values)


def take() -> AutogradState | None:
    """Take the calling runner's autograd state off the thread, leaving a new thread's; None
    if there is nothing to take."""
    values = _values()
    if values == PLAIN:
        return None
    switches = values[: len(_SWITCHES)]
    for (_, put), value in zip(_SWITCHES, PLAIN, strict=False):
        put(value)
    disabled, hooks = None, []
    if _top_hooks is not None:
        if not values[-1]:  # the hooks are disabled
            disabled = _HOOKS._saved_tensors_hooks_get_disabled_error_message() or ""
            _HOOKS._saved_tensors_hooks_enable()
        while (top := _top_hooks()) is not None:
            hooks.append(top)
            _HOOKS._pop_saved_tensors_default_hooks()
        hooks.reverse()
    return AutogradState(switches, hooks, disabled)


def put(state: AutogradState | None) -> None:
    """Put back what :func:`take` took, on a thread left as a new thread's."""
    if state is None:
        return
    for (_, put_switch), value in zip(_SWITCHES, state.switches, strict=True):
        put_switch(value)
    for pack, unpack in state.hooks:  # pushing needs the hooks enabled: disable after
        _HOOKS._push_saved_tensors_default_hooks(pack, unpack)
    if state.hooks_disabled is not None:
        try:  # with hooks under it, as torch's own code may leave them
            _HOOKS._saved_tensors_hooks_disable(state.hooks_disabled, False)
        except TypeError:  # a torch without fail_if_non_empty
            _HOOKS._saved_tensors_hooks_disable(state.hooks_disabled)


def clear() -> None:
    """Leave the thread as a new thread's when a greenlet runner ends: the next runner to run
    on it puts its own state on a clean thread."""
    take()
