"""Object-storage client benchmark: per-request overhead of boto3, aiobotocore and obstore.

Starts the test rig's moto S3 server (``tests/objstore/s3rig.py``, mutating requests
serialised) in a SUBPROCESS, so the CPU time this process accumulates is the client's alone.
For each client it runs N sequential conditional PUTs (``If-None-Match: *`` on distinct keys,
small bodies) and then N sequential GETs of those keys from one asyncio program, the way
``minidb.objstore`` would call them:

- ``boto3``: the blocking client, each call in ``asyncio.to_thread`` (the default pool);
- ``aiobotocore``: botocore's async port on aiohttp;
- ``obstore``: Rust ``object_store`` via pyo3 (``put_async(mode="create")``, ``get_async``).

Printed per client and operation: p50 and mean wall time per request, and client CPU per
request (``time.process_time`` of this process divided by N). moto itself dominates the wall
time on loopback; the CPU column is what the client costs us. The last line is JSON.

    python bench/objstore.py             # N=500
    python bench/objstore.py --n 100     # a smoke run
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
BODY = b"x" * 256
SERVER_STARTUP_TIMEOUT_S = 30.0

_SERVER_SNIPPET = """
import sys, time
sys.path.insert(0, {root!r})
from tests.objstore.s3rig import MotoServer
server = MotoServer().start()
print(server.endpoint, flush=True)
sys.stdin.read()
"""


def _start_server() -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", _SERVER_SNIPPET.format(root=str(ROOT))],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline().strip()
    if not line.startswith("http://"):
        proc.kill()
        raise SystemExit(f"moto server did not start: {line!r}")
    return proc, line


def _boto_kwargs(endpoint: str) -> dict[str, Any]:
    from botocore.config import Config

    return dict(
        endpoint_url=endpoint, region_name="us-east-1",
        aws_access_key_id="testing", aws_secret_access_key="testing-secret",
        config=Config(signature_version="s3v4", retries={"total_max_attempts": 1},
                      s3={"addressing_style": "path"}),
    )


async def _measure(n: int, call: Callable[[int], Awaitable[Any]]) -> dict[str, float]:
    walls = []
    cpu0 = time.process_time()
    for i in range(n):
        t0 = time.perf_counter()
        await call(i)
        walls.append(time.perf_counter() - t0)
    cpu = time.process_time() - cpu0
    return {
        "p50_ms": statistics.median(walls) * 1e3,
        "mean_ms": statistics.fmean(walls) * 1e3,
        "cpu_ms": cpu / n * 1e3,
    }


async def bench_boto3(endpoint: str, bucket: str, n: int) -> dict[str, dict[str, float]]:
    import boto3

    client = boto3.client("s3", **_boto_kwargs(endpoint))

    async def put(i: int) -> None:
        await asyncio.to_thread(
            client.put_object, Bucket=bucket, Key=f"boto3/{i}", Body=BODY, IfNoneMatch="*"
        )

    async def get(i: int) -> None:
        def read() -> bytes:
            return bytes(client.get_object(Bucket=bucket, Key=f"boto3/{i}")["Body"].read())

        await asyncio.to_thread(read)

    return {"put": await _measure(n, put), "get": await _measure(n, get)}


async def bench_aiobotocore(endpoint: str, bucket: str, n: int) -> dict[str, dict[str, float]]:
    from aiobotocore.session import get_session

    async with get_session().create_client("s3", **_boto_kwargs(endpoint)) as client:

        async def put(i: int) -> None:
            await client.put_object(Bucket=bucket, Key=f"aio/{i}", Body=BODY, IfNoneMatch="*")

        async def get(i: int) -> None:
            response = await client.get_object(Bucket=bucket, Key=f"aio/{i}")
            async with response["Body"] as stream:
                await stream.read()

        return {"put": await _measure(n, put), "get": await _measure(n, get)}


async def bench_obstore(endpoint: str, bucket: str, n: int) -> dict[str, dict[str, float]]:
    import obstore
    from obstore.store import S3Store

    store = S3Store(
        bucket, endpoint=endpoint, region="us-east-1",
        access_key_id="testing", secret_access_key="testing-secret",
        client_options={"allow_http": True}, retry_config={"max_retries": 0},
        virtual_hosted_style_request=False, conditional_put="etag",
    )

    async def put(i: int) -> None:
        await obstore.put_async(store, f"obstore/{i}", BODY, mode="create")

    async def get(i: int) -> None:
        result = await obstore.get_async(store, f"obstore/{i}")
        await result.bytes_async()

    return {"put": await _measure(n, put), "get": await _measure(n, get)}


CLIENTS = {"boto3": bench_boto3, "aiobotocore": bench_aiobotocore, "obstore": bench_obstore}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=500, help="requests per operation per client")
    parser.add_argument("--clients", default=",".join(CLIENTS))
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    from tests.objstore.s3rig import boto_client

    os.environ.setdefault("AWS_EC2_METADATA_DISABLED", "true")
    proc, endpoint = _start_server()
    try:
        bucket = "bench"
        boto_client(endpoint).create_bucket(Bucket=bucket)
        results: dict[str, Any] = {}
        print(f"{'client':<12} {'op':<4} {'p50 ms':>8} {'mean ms':>8} {'cpu ms/req':>10}")
        for name in args.clients.split(","):
            results[name] = asyncio.run(CLIENTS[name](endpoint, bucket, args.n))
            for op, row in results[name].items():
                print(f"{name:<12} {op:<4} {row['p50_ms']:>8.2f} {row['mean_ms']:>8.2f}"
                      f" {row['cpu_ms']:>10.2f}")
        print(json.dumps({"n": args.n, "results": results}))
    finally:
        proc.kill()
        proc.wait()


if __name__ == "__main__":
    main()
