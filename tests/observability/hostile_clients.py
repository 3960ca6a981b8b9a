"""Hostile loopback clients of the agent's HTTP endpoint, in a process of their own (so that
they load the server, not the test's event loop): half flood ``/metrics`` with keep-alive
connections, half connect and send nothing; each connection is opened again as soon as the
server closes it. Runs until its stdin closes, then prints how the flood's requests were
answered, as JSON: statuses, or the name of the error that ended a request.

    python -m tests.observability.hostile_clients PORT CONNECTIONS
"""

from __future__ import annotations

import asyncio
import json
import sys

import aiohttp


async def _run(port: int, connections: int) -> dict[str, int]:
    answers: dict[str, int] = {}
    done = asyncio.Event()
    url = f"http://127.0.0.1:{port}/metrics"

    async def flood(http: aiohttp.ClientSession) -> None:
        while not done.is_set():
            try:
                async with http.get(url) as resp:
                    await resp.read()
                    key = str(resp.status)
            except (aiohttp.ClientError, OSError) as exc:
                key = type(exc).__name__
            answers[key] = answers.get(key, 0) + 1

    async def idle() -> None:
        while not done.is_set():
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            await reader.read()  # until the server closes it
            writer.close()

    async def until_stdin_closes() -> None:
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, sys.stdin.read)
        done.set()

    flooders = connections // 2
    # Waiting to connect is the excess delayed, not a request cut: no connect timeout.
    async with aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=flooders), timeout=aiohttp.ClientTimeout(None)
    ) as http:
        tasks = [asyncio.create_task(flood(http)) for _ in range(flooders)]
        tasks += [asyncio.create_task(idle()) for _ in range(connections - flooders)]
        print("flooding", flush=True)
        await until_stdin_closes()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    return answers


def main() -> None:
    port, connections = int(sys.argv[1]), int(sys.argv[2])
    print(json.dumps(asyncio.run(_run(port, connections))), flush=True)


if __name__ == "__main__":
    main()
