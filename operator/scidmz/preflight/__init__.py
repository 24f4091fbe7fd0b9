"""``scidmz preflight``: what a node needs for the parts of a border link it holds, checked
before the link is applied, and never changed.

``roles`` (pure) reads a ``BorderLink`` and a node name into what runs there: the campus
shaper, DTN hosts' caps, BR1's buffer actuator, and a software tap's mirror interfaces.
``facts`` reads the node (interfaces, offloads, root qdiscs, capabilities, the kernel's
configuration, congestion controls, packet sockets, a compiler): read-only system calls
and files, no ``tc`` or ``ip`` change. ``checks`` (pure) judges the facts against the roles:
each finding ok, a warning or a failure, with what to do about it.
"""
