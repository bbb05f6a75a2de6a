"""Which core sends: only one core per context writes messages to the server.

Without a server config that is block 0 of the core type that prepares; with
``HcclServerConfig{ON_AIV, 10}`` it is AIV block 10. Other cores run the same
calls, get the same handle ids and send nothing.
"""

from __future__ import annotations

from typing import Any

from ..core.constants import CoreType, HcclServerConfig
from ..kernel.cores import AIC, AIV, CoreContext, current_core_context
from .failures import breach

#: The default server config, ``{CoreType::DEFAULT, 0}`` (``DEFAULT_CFG`` in AscendC).
DEFAULT_CFG = HcclServerConfig()


def server_config(config: Any) -> HcclServerConfig:
    """An ``HcclServerConfig`` from the config or a ``(CoreType, blockId)`` pair."""
    if isinstance(config, HcclServerConfig):
        return config
    if not isinstance(config, (tuple, list)) or len(config) != 2:
        raise ValueError(
            "the server config must be an HcclServerConfig or a (CoreType, blockId) pair, "
            f"not {config!r}"
        )
    return HcclServerConfig(*config)


def calling_core() -> CoreContext:
    """The kernel core that makes the current call (Hccl methods run only inside a kernel)."""
    core = current_core_context()
    if core is None:
        raise RuntimeError("Hccl methods must be called inside a kernel started by hccl_py.launch")
    return core


def is_sender(config: HcclServerConfig, core: CoreContext) -> bool:
    """Whether ``core`` is the one that writes messages for this server config."""
    if config.type == CoreType.DEFAULT:
        return core.block_idx == config.blockId
    want = AIV if config.type == CoreType.ON_AIV else AIC
    return core.kind == want and core.block_idx == config.blockId


def missing_sender(config: HcclServerConfig, core: CoreContext) -> str | None:
    """Why no core of this launch can send for ``config``, or None."""
    kind = (
        core.kind
        if config.type == CoreType.DEFAULT
        else (AIV if config.type == CoreType.ON_AIV else AIC)
    )
    n = core.launch.cores_of_kind[kind]
    if 0 <= config.blockId < n:
        return None
    return (
        f"HcclServerConfig names {kind.name} block {config.blockId} as the sending core, but this "
        f"launch has {n} {kind.name} cores, blocks 0..{n - 1} (block_dim="
        f"{core.launch.block_dim}, kernel_type={core.launch.kernel_type!r}): no task would "
        "ever be sent"
    )


def other_working_core(obj: Any, core: CoreContext) -> str | None:
    """Why a Finalize of ``core`` breaks the server when the working block of the other core
    type sends (a server config of type DEFAULT, the default one included); None otherwise.

    ``{CoreType::DEFAULT, n}`` makes block n of every core type a working core
    (``InitWorkingFlag``: ``GetBlockIdx() == blockId``, whatever the type): its Finalize writes
    a FINALIZE message into the first message slot of its own count, the slot of the sender's
    first task, and waits for a finished count that never comes (hccl_aicpu_impl.h,
    ``Finalize``; the CCU client likewise into slot ``globalCurWaitId_``). Not under debugMode
    1, whose client waits for nothing.
    """
    if obj.config.type != CoreType.DEFAULT or obj.compute_only:
        return None
    sender = obj.state.sender_core
    if sender is not None and sender.kind != core.kind:
        return _two_working_cores(core.kind, sender.kind, obj.config.blockId)
    obj.state.finalize_kinds.add(core.kind)
    return None


def _two_working_cores(finalizing: Any, sending: Any, block: int) -> str:
    """The report of a Finalize of ``finalizing``'s working block beside ``sending``'s tasks."""
    default = " (the default one)" if block == 0 else ""
    return (
        f"{finalizing.name} block {block} finalizes while {sending.name} block {block} sends "
        f"the tasks: the server config {{DEFAULT, {block}}}{default} "
        f"makes block {block} of every core type a working core (InitWorkingFlag), so its "
        "FINALIZE message lands in the sender's first message slot and the kernel hangs on "
        "hardware; call Finalize on the sending core only "
        f"(g_coreType == {sending.name}) or name it with HcclServerConfig(ON_{sending.name}, "
        f"{block})"
    )


def core_problem(obj: Any, core: CoreContext, sends: bool) -> str | None:
    """Why ``core`` may not Prepare for the Hccl object whose binding is ``obj``, or None.

    ``sends``: :func:`is_sender` of ``core`` (every caller has asked it already). A Prepare
    after block 0 of the other core type finalized (:func:`other_working_core`) is an error
    in every mode: it raises here."""
    missing = missing_sender(obj.config, core)
    if missing or not sends:
        return missing
    state = obj.state
    if obj.config.type == CoreType.DEFAULT:
        state.prepare_kinds.add(core.kind)
        if len(state.prepare_kinds) > 1:
            return (
                "Prepare was called from both AIC and AIV block 0 without an "
                "HcclServerConfig; all calls must run on one core type"
            )
        finalized = state.finalize_kinds - {core.kind}
        if finalized:
            first = next(iter(finalized))
            breach(
                "second-working-core",
                f"Prepare: {_two_working_cores(first, core.kind, obj.config.blockId)}",
                domain=state.group.name,
            )
    if state.sender not in (None, obj):
        return "a second Hccl object sends on the same context on this core"
    return None


def has_other_cores(core: CoreContext) -> bool:
    """Whether the launch of ``core`` has other cores (which get handle ids of their own).

    A refusal that only the sending core can make (it needs the task, or GM the
    other cores do not read) cannot return -1 there alone when other cores
    prepare too: their next handle ids would be one ahead of the sending core's.
    """
    return sum(core.launch.cores_of_kind.values()) > 1
