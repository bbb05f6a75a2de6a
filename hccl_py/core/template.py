"""C++ template flags in Python: ``hccl.AllGather[True](...)`` and ``SyncAll[False]()``."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

import numpy as np

from .errors import HcclUsageError


class TemplateFunction:
    """A callable whose boolean template argument is given with ``[flag]`` or as a keyword.

    ``f[True](*args)`` is ``f(*args, **{keyword: True})``; ``f(*args)`` uses the
    function's own default. As a class attribute it binds like a method. Arguments
    that do not fit the signature are an :class:`~hccl_py.core.errors.HcclUsageError`
    naming the AscendC signature (through the bound object's ``_signature_misfit`` when
    it has one, so that ``strict=False`` returns -1), never a Python TypeError.
    """

    def __init__(
        self,
        func: Callable[..., Any],
        keyword: str,
        bound: Any = None,
        convert: Callable[[Any], Any] = bool,
    ) -> None:
        self._func = func
        self._keyword = keyword
        self._bound = bound
        self._convert = convert
        functools.update_wrapper(self, func)

    def __get__(self, obj: Any, owner: type | None = None) -> TemplateFunction:
        if obj is None:
            return self
        # bound like a method, at each access: the attributes that update_wrapper gave this
        # one, assigned as they are (a second update_wrapper costs some 30 calls per access)
        bound = object.__new__(TemplateFunction)
        bound._func, bound._keyword, bound._bound = self._func, self._keyword, obj
        bound._convert, bound.__wrapped__ = self._convert, self.__wrapped__
        bound.__module__, bound.__name__ = self.__module__, self.__name__
        bound.__qualname__, bound.__doc__ = self.__qualname__, self.__doc__
        bound.__annotations__ = self.__annotations__
        return bound

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._checked(args, kwargs)

    def __getitem__(self, flag: bool) -> Callable[..., Any]:
        try:  # numpy's bools and ints too, as C++'s
            if not isinstance(flag, (bool, int, np.bool_, np.integer)):
                raise ValueError(flag)
            value = self._convert(flag)
        except ValueError:  # an int that is no member of an enum template argument
            raise HcclUsageError(
                f"{self._func.__name__}[...] takes {_kind(self._convert)} template argument, "
                f"not {flag!r}"
            ) from None
        return lambda *args, **kwargs: self._checked(args, {**kwargs, self._keyword: value})

    def _checked(self, args: tuple, kwargs: dict[str, Any]) -> Any:
        """Call the function; arguments that do not fit its signature are reported as misuse
        (:func:`call_checked`, inline: every kernel call of a template method comes here)."""
        func, bound = self._func, self._bound
        lead = () if bound is None else (bound,)
        try:
            return func(*lead, *args, **kwargs)
        except TypeError as exc:
            return misfit_or_raise(exc, func, (*lead, *args), kwargs, bound, self._keyword)

    def __repr__(self) -> str:
        return f"<template {self._func.__qualname__}[{self._keyword}]>"


def _kind(convert: Callable[[Any], Any]) -> str:
    """What a template argument converted by ``convert`` is: ``a bool``, or an enum's members."""
    if convert is bool:
        return "a bool"
    members = ", ".join(f"{convert.__name__}.{m.name} ({int(m)})" for m in convert)
    return f"a {convert.__name__} ({members})"


def template(
    keyword: str, convert: Callable[[Any], Any] = bool
) -> Callable[[Callable[..., Any]], TemplateFunction]:
    """Decorator: make ``keyword`` settable as a ``[flag]`` template argument.

    ``convert`` turns the bracketed value into the keyword's value (``bool`` by
    default; an enum class for enum template arguments such as ``ScopeType``).
    """

    def wrap(func: Callable[..., Any]) -> TemplateFunction:
        return TemplateFunction(func, keyword, convert=convert)

    return wrap


def ascend_signature(func: Callable[..., Any], keyword: str | None = None) -> str:
    """The call as AscendC writes it: ``AllReduce[commit](sendBuf, ..., repeat=1)``."""
    params = [
        str(p.replace(annotation=inspect.Parameter.empty))
        for name, p in inspect.signature(func).parameters.items()
        if name not in ("self", keyword)
    ]
    flag = f"[{keyword}]" if keyword else ""
    return f"{func.__name__}{flag}({', '.join(params)})"


def misfit(
    func: Callable[..., Any], args: tuple, kwargs: dict[str, Any], keyword: str | None = None
) -> str | None:
    """Why ``args``/``kwargs`` do not fit ``func``'s signature (naming its AscendC form), or None.

    ``args`` include ``self`` for methods; ``keyword`` is the template argument.
    """
    try:
        inspect.signature(func).bind(*args, **kwargs)
    except TypeError as exc:
        given = len(args) - (1 if "self" in inspect.signature(func).parameters else 0)
        flag = f", with the template flag given as {func.__name__}[...]" if keyword else ""
        return (
            f"{func.__name__}: {exc} ({given} positional given); the AscendC signature is "
            f"{ascend_signature(func, keyword)}{flag}"
        )
    return None


def report_misfit(bound: Any, name: str, reason: str) -> Any:
    """Report arguments that do not fit a call: through ``bound._signature_misfit`` if it has one."""
    fail = getattr(bound, "_signature_misfit", None)
    if fail is None:
        raise HcclUsageError(reason)
    return fail(reason, op=name)


def call_checked(
    func: Callable[..., Any],
    args: tuple,
    kwargs: dict[str, Any],
    bound: Any = None,
    keyword: str | None = None,
) -> Any:
    """``func(*args, **kwargs)``; arguments that do not fit its signature are reported as misuse.

    A TypeError raised inside the call itself (the arguments fit) propagates unchanged.
    """
    try:
        return func(*args, **kwargs)
    except TypeError as exc:
        return misfit_or_raise(exc, func, args, kwargs, bound, keyword)


def misfit_or_raise(
    exc: TypeError,
    func: Callable[..., Any],
    args: tuple,
    kwargs: dict[str, Any],
    bound: Any = None,
    keyword: str | None = None,
) -> Any:
    """After ``func(*args, **kwargs)`` raised ``exc``: report a misfit of the arguments, else re-raise."""
    reason = misfit(func, args, kwargs, keyword)
    if reason is None:
        raise exc
    return report_misfit(bound, func.__name__, reason)


def checked(method: Callable[..., Any]) -> Callable[..., Any]:
    """Decorator for client methods: arguments that do not fit are reported, as template calls are."""

    @functools.wraps(method)
    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:  # call_checked, inline
            return method(self, *args, **kwargs)
        except TypeError as exc:
            return misfit_or_raise(exc, method, (self, *args), kwargs, self)

    return call
