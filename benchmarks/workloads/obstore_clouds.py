"""The transport question of benchmarks/workloads/obstore.py, asked for GCS and
Azure: should durable_obj's GCS store (gcsfs's aiohttp session, JSON API) and
Azure store (azure-storage-blob's aio client) send their conditional writes
through obstore (the Rust `object_store` crate), as the S3 store does?

    python benchmarks/run.py --only clouds            # 200 PUTs of each kind, each cloud
    python benchmarks/run.py --only clouds -- --only azure
    python benchmarks/run.py --only clouds --smoke    # tiny: proves it runs, measures nothing

Servers, started and stopped here on free 127.0.0.1 ports by
tests/serverprocs.py (as the tests start them): fake-gcs-server for GCS,
Azurite's blob service for Azure.

Figures, each the same requests through both clients, alternating:

* create: a conditional create of a fresh 3 KB key (GCS `ifGenerationMatch=0`,
  Azure `If-None-Match: *`), p50 / p99 latency and the client's CPU per
  request (`time.process_time`, this process: the servers run apart);
* replace: a compare-and-swap of one 2 KB key (GCS generation, Azure ETag),
  the token taken from the previous answer.

Since durable_obj/stores/azwrites.py the Azure store's own rows are its
obstore path; `DURABLE_OBJ_AZURE_WRITES=client` measures its SDK path again.

It also checks, and prints, the semantics a transport must keep: a second
create of a key is refused (durable_obj: None; obstore: AlreadyExistsError)
and a replace with a stale token is refused (None; PreconditionError), with
the HTTP status the server sent.

obstore's GCS client speaks the XML API (`PUT /{bucket}/{key}` with an
`x-goog-if-generation-match` header). fake-gcs-server routes that request to
its JSON-API upload handler, which wants `uploadType` (or a signed URL's
`X-Goog-Algorithm`) in the query and answers 400 "invalid uploadType"; its
signed-URL upload ignores preconditions anyway. So against fake-gcs-server
obstore's GCS writes cannot be measured; the script tries once, with the
emulator configuration object_store documents (a service-account key with
`gcs_base_url` and `disable_oauth`: no token request leaves the machine),
and prints the error.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import tempfile
import urllib.parse
import uuid
from typing import Any

from harness.report import pct, timed

from durable_obj.stores import open_store
from durable_obj.stores.base import Version
from tests import serverprocs

_STATUS = re.compile(r"status code: (\d{3})")
_CODE = re.compile(r"<Code>(\w+)</Code>|\"reason\":\"(\w+)\"")


def first_line(exc: BaseException, chars: int = 300) -> str:
    return f"{type(exc).__name__}: {str(exc).splitlines()[0][:chars]}"


def refused(exc: BaseException) -> str:
    """The class of a refusal and the HTTP status obstore reports in its message."""
    found, code = _STATUS.search(str(exc)), _CODE.search(str(exc))
    said = f" {code.group(1) or code.group(2)}" if code else ""
    return f"{type(exc).__name__}, HTTP {found.group(1) if found else '?'}{said}"


# -- the two clouds -------------------------------------------------------------------


class Cloud:
    """One emulator, durable_obj's store on it, and obstore's (or why not)."""

    name = ""

    def __init__(self, workdir: str) -> None:
        self.prefix = f"obs-{uuid.uuid4().hex[:8]}"
        self.server: Any = None
        self.store: Any = None
        self.obs: Any = None
        self.obs_error = ""
        try:
            self.start(workdir)
        except BaseException:
            self.stop()  # a server already started goes down with the failure
            raise

    def start(self, workdir: str) -> None:
        raise NotImplementedError

    def obstore_token(self, put: Any) -> Any:
        """The `mode` of a compare-and-swap against the answer `put`."""
        return {"e_tag": put["e_tag"]}

    def raw_statuses(self, existing: str, key: str, stale: Version) -> dict[str, str]:
        """HTTP status the server sends to the store's own requests, if known here."""
        return {}

    def stop(self) -> None:
        if self.store is not None:
            self.store.close()
        if self.server is not None:
            self.server.stop()


class GCS(Cloud):
    name = "gcs"

    def start(self, workdir: str) -> None:
        self.server, self.endpoint = serverprocs.start_fake_gcs(workdir)
        options = {"endpoint_url": self.endpoint, "token": "anon", "project": "durable-test"}
        self.store = open_store(f"gs://{serverprocs.BUCKET}/{self.prefix}", options)
        from obstore.store import GCSStore

        # object_store's documented emulator set-up: the base URL and no OAuth
        # come from the service-account key; no token is ever requested.
        key = {
            "gcs_base_url": self.endpoint,
            "disable_oauth": True,
            "client_email": "",
            "private_key": "",
            "private_key_id": "",
        }
        obs = GCSStore(
            serverprocs.BUCKET,
            prefix=self.prefix,
            service_account_key=json.dumps(key),
            client_options={"allow_http": True},
            retry_config={"max_retries": 0},
        )
        import obstore

        try:
            obstore.put(obs, "probe", b"x", mode="create")
        except Exception as exc:
            self.obs_error = first_line(exc)
            return
        self.obs = obs

    def obstore_token(self, put: Any) -> Any:
        # object_store's GCS client matches the generation (`version`), not the ETag.
        return {"e_tag": put["e_tag"], "version": put["version"]}

    def raw_statuses(self, existing: str, key: str, stale: Version) -> dict[str, str]:
        """The multipart JSON-API upload durable_obj sends, by hand, to read the status
        (the server refuses both, so nothing changes)."""
        out = {}
        for what, name, generation in (
            ("existing key", f"{self.prefix}/{existing}", "0"),
            ("stale token", f"{self.prefix}/{key}", stale.token),
        ):
            boundary = uuid.uuid4().hex
            body = (
                f"--{boundary}\r\nContent-Type: application/json; charset=UTF-8\r\n\r\n"
                f"{json.dumps({'name': name})}\r\n--{boundary}\r\n"
                "Content-Type: application/octet-stream\r\n\r\nz\r\n"
                f"--{boundary}--\r\n"
            ).encode()
            query = urllib.parse.urlencode(
                {"uploadType": "multipart", "ifGenerationMatch": generation}
            )
            url = f"{self.endpoint}/upload/storage/v1/b/{serverprocs.BUCKET}/o?{query}"
            headers = {"Content-Type": f"multipart/related; boundary={boundary}"}
            out[what] = f"HTTP {serverprocs._http('POST', url, body, headers)}"
        return out


class Azure(Cloud):
    name = "azure"

    def start(self, workdir: str) -> None:
        self.server, port = serverprocs.start_azurite(workdir)
        conn = serverprocs.azurite_connection_string(port)
        self.store = open_store(
            f"az://{serverprocs.BUCKET}/{self.prefix}", {"connection_string": conn}
        )
        from obstore.store import AzureStore

        self.conn = conn
        # Not `use_emulator=True`: with it object_store ignores `endpoint` and
        # goes to AZURITE_BLOB_STORAGE_URL or http://127.0.0.1:10000.
        self.obs = AzureStore(
            serverprocs.BUCKET,
            prefix=self.prefix,
            account_name=serverprocs.AZURITE_ACCOUNT,
            access_key=serverprocs.AZURITE_KEY,
            endpoint=f"http://{serverprocs.HOST}:{port}/{serverprocs.AZURITE_ACCOUNT}",
            client_options={"allow_http": True},
        )

    def raw_statuses(self, existing: str, key: str, stale: Version) -> dict[str, str]:
        """The Put Blob durable_obj's store sends (the same SDK, its sync client),
        by hand, to read the status (the server refuses both, so nothing changes)."""
        from azure.core import MatchConditions
        from azure.core.exceptions import HttpResponseError
        from azure.storage.blob import BlobServiceClient

        out = {}
        with BlobServiceClient.from_connection_string(self.conn) as service:
            box = service.get_container_client(serverprocs.BUCKET)
            for what, name, condition in (
                ("existing key", existing, {"overwrite": False}),
                (
                    "stale token",
                    key,
                    {
                        "overwrite": True,
                        "etag": stale.token,
                        "match_condition": MatchConditions.IfNotModified,
                    },
                ),
            ):
                blob = box.get_blob_client(f"{self.prefix}/{name}")
                try:
                    blob.upload_blob(b"z", **condition)
                    out[what] = "HTTP 2xx (accepted)"
                except HttpResponseError as exc:
                    code = getattr(exc, "error_code", None)
                    code = getattr(code, "value", code)
                    out[what] = f"HTTP {exc.status_code} {code}"
        return out


# -- semantics and timing -------------------------------------------------------------


def semantics(cloud: Cloud) -> dict[str, str]:
    store, obs = cloud.store, cloud.obs
    assert store.create("sem/k", b"1") is not None
    ours_create = store.create("sem/k", b"2") is None
    v1 = store.create("sem/h", b"a")
    assert store.replace("sem/h", b"b", v1) is not None
    ours_stale = store.replace("sem/h", b"c", v1) is None
    vd = store.create("sem/d", b"a")
    store.delete("sem/d")
    ours_gone = store.replace("sem/d", b"b", vd) is None
    raw = cloud.raw_statuses("sem/k", "sem/h", v1)
    yes = "refused (None)"
    out = {
        "durable_obj second create": (yes if ours_create else "NOT refused")
        + (f", server sent {raw['existing key']}" if raw else ""),
        "durable_obj stale replace": (yes if ours_stale else "NOT refused")
        + (f", server sent {raw['stale token']}" if raw else ""),
        "durable_obj replace of a deleted key": yes if ours_gone else "NOT refused",
    }
    if obs is None:
        out["obstore"] = f"not measurable on this emulator: {cloud.obs_error}"
        return out
    import obstore

    obstore.put(obs, "sem/ko", b"1", mode="create")
    try:
        obstore.put(obs, "sem/ko", b"2", mode="create")
        out["obstore second create"] = "NOT refused"
    except Exception as exc:
        out["obstore second create"] = f"refused ({refused(exc)})"
    put = obstore.put(obs, "sem/ho", b"a")
    obstore.put(obs, "sem/ho", b"b", mode=cloud.obstore_token(put))
    try:
        obstore.put(obs, "sem/ho", b"c", mode=cloud.obstore_token(put))
        out["obstore stale replace"] = "NOT refused"
    except Exception as exc:
        out["obstore stale replace"] = f"refused ({refused(exc)})"
    gone = obstore.put(obs, "sem/do", b"a")
    obstore.delete(obs, "sem/do")
    try:
        obstore.put(obs, "sem/do", b"b", mode=cloud.obstore_token(gone))
        out["obstore replace of a deleted key"] = "NOT refused"
    except Exception as exc:
        out["obstore replace of a deleted key"] = f"refused ({refused(exc)})"
    return out


def bench_puts(cloud: Cloud, n: int) -> dict[str, dict[str, list[float]]]:
    import obstore

    store, obs = cloud.store, cloud.obs
    body, head = os.urandom(3072), os.urandom(2048)
    out: dict[str, dict[str, list[float]]] = {}

    def keep(name: str, wall: float, cpu: float) -> None:
        runs = out.setdefault(name, {"wall": [], "cpu": []})
        runs["wall"].append(wall)
        runs["cpu"].append(cpu)

    version = store.create("cas/h", head)
    mode = cloud.obstore_token(obstore.put(obs, "cas/o", head)) if obs is not None else {}
    for i in range(n):
        # Who goes first alternates, request by request.
        order = ("durable_obj", "obstore") if i % 2 == 0 else ("obstore", "durable_obj")
        key = f"c/{uuid.uuid4().hex}"
        for who in order:
            if who == "durable_obj":
                w, c, got = timed(lambda key=key: store.create(key, body))
                assert got is not None
                keep("create durable_obj", w, c)
                w, c, version = timed(lambda v=version: store.replace("cas/h", os.urandom(2048), v))
                assert version is not None
                keep("replace durable_obj", w, c)
            elif obs is not None:
                w, c, _ = timed(lambda key=key: obstore.put(obs, key + "o", body, mode="create"))
                keep("create obstore", w, c)
                w, c, res = timed(
                    lambda m=mode: obstore.put(obs, "cas/o", os.urandom(2048), mode=m)
                )
                mode = cloud.obstore_token(res)
                keep("replace obstore", w, c)
    # The writes landed: the last key of each client reads back whole.
    got = store.get(key)
    assert got is not None and got.data == body
    if obs is not None:
        assert bytes(obstore.get(obs, key + "o").bytes()) == body
    return out


def measure(kind: type[Cloud], n: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix=f"bench-{kind.name}-") as workdir:
        cloud = kind(workdir)
        try:
            checks = semantics(cloud)
            puts = bench_puts(cloud, n)
        finally:
            cloud.stop()
    return {
        "checks": checks,
        "obstore_error": cloud.obs_error or None,
        "puts": {
            name: {
                "p50_ms": statistics.median(r["wall"]) * 1e3,
                "p99_ms": pct(r["wall"], 0.99) * 1e3,
                "cpu_ms": statistics.mean(r["cpu"]) * 1e3,
            }
            for name, r in sorted(puts.items())
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--puts", type=int, default=200, help="requests per PUT kind")
    parser.add_argument("--only", choices=("gcs", "azure"), help="one cloud only")
    parser.add_argument("--smoke", action="store_true", help="tiny: runs, measures nothing")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()
    if args.smoke:
        args.puts = 5
    serverprocs.loopback_only()
    clouds = [c for c in (GCS, Azure) if args.only in (None, c.name)]
    doc: dict[str, Any] = {"smoke": args.smoke, "puts_per_kind": args.puts}
    for kind in clouds:
        doc[kind.name] = measure(kind, args.puts)
    if args.json:
        print(json.dumps(doc))
        return
    servers = {"gcs": "fake-gcs-server", "azure": "Azurite"}
    for kind in clouds:
        res = doc[kind.name]
        print(f"{servers[kind.name]} on 127.0.0.1; {args.puts} PUTs of each kind")
        for name, said in res["checks"].items():
            print(f"  {name}: {said}")
        print(f"{'':24}{'p50 ms':>10}{'p99 ms':>10}{'CPU ms/req':>12}")
        for name, r in res["puts"].items():
            print(f"{name:24}{r['p50_ms']:>10.2f}{r['p99_ms']:>10.2f}{r['cpu_ms']:>12.2f}")
        print()
    if args.smoke:
        print("--smoke: a check that it runs; not a measurement")


if __name__ == "__main__":
    main()
