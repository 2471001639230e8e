"""What turns one client's audio into ordered messages: a ``Session``, a ``SessionGroup``
for a connection of many tracks, their speaker labelling and outbox, and the
``StreamFactory`` a transport builds them with. Drivable in-process, with no socket."""
