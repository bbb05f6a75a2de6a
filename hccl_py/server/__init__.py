"""The server side: the protocol every backend implements, and the rules they all share.

- :mod:`.protocol`: ``Server`` and ``Backend``, what a client sends whichever backend runs it.
- :mod:`.ordering`: Prepare order, InterHcclGroupSync, failure spreading.
- :mod:`.task_queue`: the one domain task-queue state machine both servers keep their tasks in.
- :mod:`.agreement`: cross-rank task checks and their reports.
- :mod:`.reduce`: rank-order reductions (bit-identical on every backend).
- :mod:`.blocking`: timeouts and deadlock detection.
- :mod:`.windows`: communication windows and their in-process store.
"""
