"""The benchmark behind ``python -m hccl_py bench``.

- :mod:`.ops`: what each benchmarked op moves and its bandwidth factors;
- :mod:`.reference`: inputs and the numpy reference that scores results;
- :mod:`.calls`: one timed iteration on one rank (a kernel launch or a framework call);
- :mod:`.sweep`: sizes, per-rank timing, merged rows;
- :mod:`.table`: the table, JSON and plot; :mod:`.cli`: the command line.
"""
