#!/usr/bin/env python3
"""A TCP proxy on 127.0.0.1 that holds every reply from its upstream for a fixed time.

    delay-proxy.py LISTEN_PORT UPSTREAM_PORT DELAY_MS

Bytes from a client go upstream at once; bytes coming back are written to the client DELAY_MS
after they arrived, in order. A floodgate Redis lane has one script call in flight at a time, so
behind this proxy each socket serves one call per DELAY_MS (plus Redis's own time): a store of
known capacity whatever the CPU does, for scripts/bench-shedding.sh. Loopback only.
"""

import asyncio
import sys
import time


async def pump(reader, writer, delay):
    """Copies reader to writer, each chunk `delay` seconds after it arrived, in order."""
    queue = asyncio.Queue()

    async def write_when_due():
        try:
            while (item := await queue.get()) is not None:
                due, data = item
                pause = due - time.monotonic()
                if pause > 0:
                    await asyncio.sleep(pause)
                writer.write(data)
                await writer.drain()
        except ConnectionError:
            pass
        finally:
            writer.close()

    writing = asyncio.ensure_future(write_when_due())
    try:
        while data := await reader.read(65536):
            queue.put_nowait((time.monotonic() + delay, data))
    except ConnectionError:
        pass
    queue.put_nowait(None)
    await writing


async def main():
    if len(sys.argv) != 4:
        sys.exit("usage: delay-proxy.py LISTEN_PORT UPSTREAM_PORT DELAY_MS")
    listen_port, upstream_port, delay_ms = (int(arg) for arg in sys.argv[1:])

    async def serve(client_reader, client_writer):
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection(
                "127.0.0.1", upstream_port
            )
        except OSError:
            client_writer.close()
            return
        await asyncio.gather(
            pump(client_reader, upstream_writer, 0),
            pump(upstream_reader, client_writer, delay_ms / 1000),
        )

    server = await asyncio.start_server(serve, "127.0.0.1", listen_port)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main())
