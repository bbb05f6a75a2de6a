"""See what a kernel did: a timeline of every call and round, a summary, a layout picture.

- :mod:`.recorder`: the per-rank events (off unless a run asks for them);
- :mod:`.hooks`: where the client and the servers report;
- :mod:`.chrome`: the Chrome trace JSON that Perfetto and chrome://tracing open;
- :mod:`.summary`: the end-of-run table; :mod:`.picture`: the layout picture.
"""
