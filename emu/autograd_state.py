"""Autograd's per-thread switches, which a greenlet runner takes with it when it hands on.

Greenlet runners share one OS thread, and autograd keeps these per thread:
multithreaded backward, forward-mode AD, view replay, the stack of default
saved-tensor hooks (``torch.autograd.graph.saved_tensors_hooks``) and whether
those hooks are disabled (``disable_saved_tensors_hooks``). A runner that
blocks inside ``saved_tensors_hooks`` would otherwise leave its hooks to every
runner that runs meanwhile, and find theirs when it resumes. The thread
runners' pool also uses :func:`is_plain`: a thread is reused only while these
are a new thread's. A torch without ``_top_saved_tensors_default_hooks`` (before
2.8) does not show the hook stack: there the hooks stay with the thread.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import torch

from hccl_py.server.threads import read_in_a_new_thread

_C = torch._C
_HOOKS = _C._autograd


def _top_reader() -> Callable[[], tuple[Callable, Callable] | None]:
    """The top of the calling thread's saved-tensor hook stack, in this torch's spelling."""
    top = getattr(_HOOKS, "_top_saved_tensors_default_hooks", None)
    if top is None:
        return lambda: None
    try:
        top(True)
    except TypeError:  # the form without ignore_is_tracing
        return top
    return lambda: top(True)


_top_hooks = _top_reader()


class AutogradState(NamedTuple):
    """One runner's switches, as :func:`take` found them."""

    multithreading: bool
    forward_ad: bool
    view_replay: bool
    #: Default saved-tensor hooks, (pack, unpack) pairs, the outermost first.
    hooks: list[tuple[Callable, Callable]]
    #: The error message while saved-tensor hooks are disabled; None while they are enabled.
    hooks_disabled: str | None


def _switches() -> tuple[bool, bool, bool, bool, bool]:
    return (
        _C._is_multithreading_enabled(),
        _C._is_fwd_grad_enabled(),
        _C._is_view_replay_enabled(),
        _top_hooks() is None,
        _HOOKS._saved_tensors_hooks_is_enabled(),
    )


#: A new thread's :func:`_switches`.
PLAIN = read_in_a_new_thread(_switches)


def is_plain() -> bool:
    """Whether the calling thread's switches are a new thread's: nothing for :func:`take`."""
    return _switches() == PLAIN


def take() -> AutogradState | None:
    """Take the calling runner's switches off the thread, leaving a new thread's; None if plain."""
    if is_plain():
        return None
    disabled = None
    if not _HOOKS._saved_tensors_hooks_is_enabled():
        disabled = _HOOKS._saved_tensors_hooks_get_disabled_error_message() or ""
        _HOOKS._saved_tensors_hooks_enable()
    hooks = []
    while (top := _top_hooks()) is not None:
        hooks.append(top)
        _HOOKS._pop_saved_tensors_default_hooks()
    hooks.reverse()
    state = AutogradState(
        _C._is_multithreading_enabled(),
        _C._is_fwd_grad_enabled(),
        _C._is_view_replay_enabled(),
        hooks,
        disabled,
    )
    multithreading, forward_ad, view_replay = PLAIN[:3]
    _C._set_multithreading_enabled(multithreading)
    _C._set_fwd_grad_enabled(forward_ad)
    _C._set_view_replay_enabled(view_replay)
    return state


def put(state: AutogradState | None) -> None:
    """Put back what :func:`take` took."""
    if state is None:
        return
    _C._set_multithreading_enabled(state.multithreading)
    _C._set_fwd_grad_enabled(state.forward_ad)
    _C._set_view_replay_enabled(state.view_replay)
    for pack, unpack in state.hooks:  # pushing needs the hooks enabled: disable after
        _HOOKS._push_saved_tensors_default_hooks(pack, unpack)
    if state.hooks_disabled is not None:
        try:  # with hooks under it, as torch's own code may leave them
            _HOOKS._saved_tensors_hooks_disable(state.hooks_disabled, False)
        except TypeError:  # a torch without fail_if_non_empty
            _HOOKS._saved_tensors_hooks_disable(state.hooks_disabled)
