"""The Wyoming port advertised on the local network (zeroconf, mDNS), as a
``_wyoming._tcp`` service: Home Assistant lists a service it discovers so under its
Wyoming integration, to be added with one click, as it lists wyoming-faster-whisper's
(``--zeroconf``). The advert is withdrawn when the server stops.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket

SERVICE_TYPE = "_wyoming._tcp.local."
MDNS_GROUP = "224.0.0.251"  # where mDNS is spoken: the route to it is the LAN's address


async def advertised_address(host: str) -> str:
    """The address clients reach a listener on ``host`` at: itself where it is one
    address (a name resolved, off the event loop); for every interface (``0.0.0.0``,
    ``::``), the address this machine sends to the local network from."""
    if host in ("", "0.0.0.0", "::"):
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect((MDNS_GROUP, 5353))  # no packet is sent: it only picks a route
            return probe.getsockname()[0]
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        found = await asyncio.get_running_loop().getaddrinfo(host, None, family=socket.AF_INET)
        return str(found[0][4][0])


class WyomingAdvert:
    """One Wyoming port advertised under a name, from ``started`` until ``close``."""

    def __init__(self, name: str, address: str, port: int):
        from zeroconf.asyncio import AsyncServiceInfo, AsyncZeroconf  # only where advertised

        self.address = address
        self._info = AsyncServiceInfo(
            SERVICE_TYPE,
            f"{name}.{SERVICE_TYPE}",
            addresses=[ipaddress.ip_address(address).packed],
            port=port,
        )
        self._zeroconf = AsyncZeroconf()

    @classmethod
    async def started(cls, name: str, host: str, port: int) -> WyomingAdvert:
        """The port of a listener on ``host`` announced under ``name`` (a name another
        host holds is renamed, as mDNS does)."""
        advert = cls(name, await advertised_address(host), port)
        try:
            await advert._zeroconf.async_register_service(advert._info, allow_name_change=True)
        except BaseException:
            await advert._zeroconf.async_close()
            raise
        return advert

    @property
    def name(self) -> str:
        """The name advertised (another, where another host held the one asked for)."""
        return self._info.name.removesuffix(f".{SERVICE_TYPE}")

    async def close(self) -> None:
        """Withdraw the service (a goodbye packet), and stop answering queries."""
        try:
            await self._zeroconf.async_unregister_service(self._info)
        finally:
            await self._zeroconf.async_close()
