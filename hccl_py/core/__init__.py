"""Values that every layer shares and that know nothing of kernels, servers or backends.

- :mod:`.constants`: the AscendC enumerations with their C++ values.
- :mod:`.errors`: the exception and warning classes.
- :mod:`.platform`: what each Ascend generation allows.
- :mod:`.config`: the options of one run.
- :mod:`.gm`: GM memory and byte addresses.
- :mod:`.task`: the descriptor of one Prepare call.
- :mod:`.layout`: the address arithmetic (which bytes each round touches).
- :mod:`.template`: C++ template flags as ``call[True](...)``.
- :mod:`.report`: HcclWarnings, the outcome of what hardware carries on with.
"""
