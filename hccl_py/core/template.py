"""C++ template flags in Python: ``hccl.AllGather[True](...)`` and ``SyncAll[False]()``."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any


class TemplateFunction:
    """A callable whose boolean template argument is given with ``[flag]`` or as a keyword.

    ``f[True](*args)`` is ``f(*args, **{keyword: True})``; ``f(*args)`` uses the
    function's own default. As a class attribute it binds like a method.
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
        return TemplateFunction(self._func, self._keyword, obj, self._convert)

    def _target(self) -> Callable[..., Any]:
        return self._func if self._bound is None else functools.partial(self._func, self._bound)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._target()(*args, **kwargs)

    def __getitem__(self, flag: bool) -> Callable[..., Any]:
        if not isinstance(flag, (bool, int)):
            raise TypeError(
                f"{self._func.__name__}[...] takes a bool template argument, not {flag!r}"
            )
        return functools.partial(self._target(), **{self._keyword: self._convert(flag)})

    def __repr__(self) -> str:
        return f"<template {self._func.__qualname__}[{self._keyword}]>"


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
