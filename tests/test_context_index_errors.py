"""Errors for a context index that is not an int name the value as it was given.

Before, ``GetHcclContext("1")`` in a launch with domains 0 and 1 said
``GetHcclContext(1): this launch has domains [0, 1]`` (a contradiction: the index was a
str, printed without quotes), and ``hp.launch(groups={"0": g})`` said ``got 0: Group(...)``,
which reads as the valid index 0. A framework collective given the name of a group this rank
created (``group="group_1_0"``) called it unknown.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

import hccl_py as hp


def _context_in_a_two_domain_launch(index: Any) -> None:
    group = hp.new_group([1, 0])
    hp.launch(lambda: hp.GetHcclContext(index), groups={0: hp.world_group(), 1: group})


@pytest.mark.parametrize(
    ("index", "shown"), [("1", "'1'"), (1.0, "1.0"), (True, "True"), (None, "None")]
)
def test_a_context_index_that_is_no_int(index: Any, shown: str) -> None:
    with pytest.raises(hp.WorldError) as info:
        hp.run(_context_in_a_two_domain_launch, world_size=2, args=(index,))
    message = str(info.value.failures[0])
    assert f"GetHcclContext({shown}): the context index is an int, 0 or 1" in message
    assert "this launch has domains" not in message


def test_a_context_the_launch_has_not() -> None:
    with pytest.raises(hp.WorldError) as info:
        hp.run(_context_in_a_two_domain_launch, world_size=2, args=(2,))
    assert "GetHcclContext(2): this launch has domains [0, 1]" in str(info.value.failures[0])


def _launch_with_a_str_index() -> None:
    hp.launch(lambda: None, groups={"0": hp.world_group()})


def test_a_groups_key_that_is_a_str_is_shown_quoted() -> None:
    with pytest.raises(hp.WorldError) as info:
        hp.run(_launch_with_a_str_index, world_size=2)
    assert "got '0': Group(" in str(info.value.failures[0])


def _all_reduce_by_group_name() -> None:
    group = hp.new_group([1, 0])
    hp.all_reduce(torch.ones(2), group=group.name)


def test_a_framework_group_given_by_the_name_of_a_created_group() -> None:
    """Before: ``unknown group name 'group_1_0'``, though this rank had created that group."""
    with pytest.raises(hp.WorldError) as info:
        hp.run(_all_reduce_by_group_name, world_size=2)
    message = str(info.value.failures[0])
    assert (
        "group 'group_1_0' is a group's name; the only name taken is 'hccl_world_group'" in message
    )
    assert "unknown" not in message
