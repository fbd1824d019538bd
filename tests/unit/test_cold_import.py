"""What `import durable_obj` loads, for a cold open's sake (issue 39): the
async face, asyncio and cryptography only on first use, pydantic never; chDB's library
mapped on a thread of its own (`replica/preload.py`). Each check runs in a
fresh interpreter, where nothing was imported before."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent


def fresh(code: str, **env: str) -> dict[str, object]:
    """Run `code` in a new interpreter (the repository first on its path);
    its last line of output, as JSON."""
    environ = {k: v for k, v in os.environ.items() if k != "DURABLE_OBJ_PRELOAD"}
    environ.update(env)
    environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), environ.get("PYTHONPATH")]))
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env=environ,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


#: pydantic is never imported at all: the head and the options are checked
#: by hand (`wire/model.py`, `core/options.py`).
LAZY = ["asyncio", "cryptography", "durable_obj.aio", "durable_obj.aio.pool", "pydantic"]


def test_the_async_face_and_cryptography_load_on_first_use() -> None:
    got = fresh(
        f"""
        import json, sys
        import durable_obj
        before = [m for m in {LAZY!r} if m in sys.modules]
        names = [durable_obj.AsyncDurableObject.__name__, durable_obj.aopen.__name__,
                 durable_obj.AsyncPool.__name__]
        from durable_obj import AsyncPool, aopen
        from durable_obj.aio import AsyncDurableObject
        same = durable_obj.AsyncDurableObject is AsyncDurableObject
        print(json.dumps({{"before": before, "names": names, "same": same,
                           "listed": "aopen" in dir(durable_obj),
                           "asyncio": "asyncio" in sys.modules}}))
        """
    )
    assert got["before"] == []
    assert got["names"] == ["AsyncDurableObject", "aopen", "AsyncPool"]
    assert got["same"] is True
    assert got["listed"] is True
    assert got["asyncio"] is True


def test_an_unknown_name_is_still_an_attribute_error() -> None:
    got = fresh(
        """
        import json
        import durable_obj
        try:
            durable_obj.no_such_name
        except AttributeError as exc:
            print(json.dumps({"error": str(exc)}))
        """
    )
    assert "no_such_name" in str(got["error"])


def test_a_sync_open_and_write_of_a_folder_object_loads_neither(tmp_path: Path) -> None:
    got = fresh(
        f"""
        import json, sys
        import durable_obj
        with durable_obj.open({str(tmp_path / "o")!r}, owner="t") as obj:
            obj.execute("CREATE TABLE m (k String) ENGINE = MergeTree ORDER BY k")
            obj.execute("INSERT INTO m VALUES ('a')")
            obj.flush()
            obj.checkpoint()
        with durable_obj.open({str(tmp_path / "o")!r}, read_only=True) as obj:
            rows = obj.query("SELECT count() FROM m").data().strip()
        print(json.dumps({{"rows": rows, "loaded": [m for m in {LAZY!r} if m in sys.modules]}}))
        """
    )
    assert got == {"rows": "1", "loaded": []}


def test_an_encrypted_object_loads_cryptography_when_it_needs_it(tmp_path: Path) -> None:
    got = fresh(
        f"""
        import json, sys
        import durable_obj
        key = durable_obj.StaticKey("11" * 32)
        before = "cryptography" in sys.modules
        with durable_obj.open({str(tmp_path / "e")!r}, owner="t", encryption=key) as obj:
            obj.execute("CREATE TABLE m (k String) ENGINE = MergeTree ORDER BY k")
            obj.execute("INSERT INTO m VALUES ('a')")
            obj.flush()
            obj.checkpoint()
        with durable_obj.open({str(tmp_path / "e")!r}, read_only=True, encryption=key) as obj:
            rows = obj.query("SELECT count() FROM m").data().strip()
        print(json.dumps({{"before": before, "rows": rows,
                           "after": "cryptography" in sys.modules}}))
        """
    )
    assert got == {"before": False, "rows": "1", "after": True}


def test_the_preload_maps_the_library_chdb_loads() -> None:
    """The preload maps the very file chdb's package loads first, and the
    engine module loads from it and starts, in UTC, without chdb's package
    (`replica/extension.py`)."""
    got = fresh(
        """
        import json, sys
        import durable_obj
        from durable_obj.replica import preload, server
        preload.wait()
        path = preload.library()
        maps = open("/proc/self/maps").read()
        mapped = path is not None and path in maps
        started = bool(preload._THREADS)
        server.start()
        zone = server.decoded(server._SERVER["anchor"].query("SELECT serverTimezone()", "TSV"))
        print(json.dumps({"mapped": mapped, "started": started, "zone": zone.strip(),
                          "chdb": "chdb" in sys.modules,
                          "engine": sys.modules["chdb._chdb"].__file__ == path}))
        """,
        TZ="America/New_York",
    )
    if not sys.platform.startswith("linux"):
        assert got["started"] is False
        return
    assert got == {"mapped": True, "started": True, "zone": "UTC", "chdb": False, "engine": True}


def test_the_preload_stays_off_when_asked_or_when_chdb_came_first() -> None:
    got = fresh(
        """
        import json
        import durable_obj
        from durable_obj.replica import preload
        print(json.dumps({"started": bool(preload._THREADS)}))
        """,
        DURABLE_OBJ_PRELOAD="0",
    )
    assert got == {"started": False}
    got = fresh(
        """
        import json
        import chdb
        import durable_obj
        from durable_obj.replica import preload
        print(json.dumps({"started": bool(preload._THREADS)}))
        """
    )
    assert got == {"started": False}


def test_a_fork_right_after_the_import_works() -> None:
    """A child forked while the library may still be mapping (the fork
    waits for it) imports chdb and runs a query."""
    if not hasattr(os, "fork"):
        return
    got = fresh(
        """
        import json, os
        import durable_obj
        pid = os.fork()
        if pid == 0:
            import chdb._chdb as engine
            conn = engine.connect(":memory:")
            ok = str(conn.query("SELECT 40 + 2", "CSV")).strip() == "42"
            os._exit(0 if ok else 3)
        _, status = os.waitpid(pid, 0)
        print(json.dumps({"status": os.waitstatus_to_exitcode(status)}))
        """
    )
    assert got == {"status": 0}


def test_a_process_refused_at_once_exits_cleanly(tmp_path: Path) -> None:
    """An open refused while the engine starts in the background (its
    catalogue read begun by that start, possibly after the interpreter
    stopped waiting for its threads) exits without tearing the engine
    down under a query."""
    for _ in range(3):
        got = fresh(
            f"""
            import json
            import durable_obj
            try:
                durable_obj.open({str(tmp_path / "missing")!r}, read_only=True)
            except durable_obj.NotFound:
                print(json.dumps({{"refused": True}}))
            """
        )
        assert got == {"refused": True}


def test_every_extension_module_the_import_loads_is_loaded_before_the_mapping() -> None:
    """`preload.EXTENSIONS` names every extension module `import durable_obj`
    loads: one it misses waits for chDB's library to map (the loader's lock)."""
    got = fresh(
        """
        import json, sys
        before = set(sys.modules)
        import durable_obj
        from durable_obj.replica import preload
        loaded = sorted(
            name for name, module in sys.modules.items()
            if name not in before and (getattr(module, "__file__", None) or "").endswith(".so")
            and "site-packages" not in (getattr(module, "__file__", None) or "")
        )
        print(json.dumps({"missed": [n for n in loaded if n not in preload.EXTENSIONS]}))
        """
    )
    assert got["missed"] == []


def test_the_callers_import_of_chdb_after_an_open_works(tmp_path: Path) -> None:
    """The engine module loads without chdb's package, and the working
    folder never changes (chdb's package changes it around its own load);
    the caller's own `import chdb` afterwards initialises the package, in a
    thread of its own too, on the running engine, and the object goes on."""
    got = fresh(
        f"""
        import json, os, sys, threading
        chdirs = []
        real = os.chdir
        os.chdir = lambda where: (chdirs.append(str(where)), real(where))[1]
        import durable_obj
        with durable_obj.open({str(tmp_path / "o")!r}, owner="t") as obj:
            obj.execute("CREATE TABLE m (k String) ENGINE = MergeTree ORDER BY k")
            obj.execute("INSERT INTO m VALUES ('a')")
            obj.flush()
            before = {{"chdb": "chdb" in sys.modules, "chdirs": list(chdirs)}}
            found = []
            def imports():
                import chdb
                found.append((chdb.engine_version, chdb.__version__))
            thread = threading.Thread(target=imports)
            thread.start()
            thread.join()
            import chdb
            import chdb.durable
            from durable_obj.replica import extension
            after = {{
                "version": found[0][0] == obj.query("SELECT version()").data().strip().strip('"'),
                "package": found[0][1] == chdb.__version__ != "unknown",
                "finder": [type(f).__name__ for f in sys.meta_path].count("_Finder"),
                "rows": obj.query("SELECT count() FROM m").data().strip(),
            }}
            obj.execute("INSERT INTO m VALUES ('b')")
            obj.flush()
        with durable_obj.open({str(tmp_path / "o")!r}, read_only=True) as obj:
            rows = obj.query("SELECT count() FROM m").data().strip()
        print(json.dumps({{"before": before, "after": after, "rows": rows}}))
        """,
        TZ="Asia/Tokyo",
    )
    if not sys.platform.startswith("linux"):
        return
    assert got == {
        "before": {"chdb": False, "chdirs": []},
        "after": {"version": True, "package": True, "finder": 0, "rows": "1"},
        "rows": "2",
    }


def test_the_engine_module_loads_without_the_preload_too() -> None:
    """With the preload off, the library is mapped as chdb's package maps
    it (RTLD_DEEPBIND) before the engine module loads from it; the engine
    runs in UTC."""
    got = fresh(
        """
        import json, sys
        import durable_obj
        from durable_obj.replica import preload, server
        server.start()
        zone = server.decoded(server._SERVER["anchor"].query("SELECT serverTimezone()", "TSV"))
        print(json.dumps({"started": bool(preload._THREADS), "zone": zone.strip(),
                          "chdb": "chdb" in sys.modules, "engine": "chdb._chdb" in sys.modules}))
        """,
        DURABLE_OBJ_PRELOAD="0",
        TZ="America/New_York",
    )
    expected_chdb = not sys.platform.startswith("linux")
    assert got == {"started": False, "zone": "UTC", "chdb": expected_chdb, "engine": True}


def test_an_import_of_chdb_beside_the_engine_start_waits_for_it(tmp_path: Path) -> None:
    """A caller's `import chdb` that begins while durable_obj loads chDB's
    engine module (found by attack: it ran chdb's package beside the engine
    start, whose in-memory engine then refused one of the two) initialises
    the package after the engine started, on it; the open and the import
    both succeed, in UTC, and the finder is gone."""
    for delay in (0.0, 0.002, 0.02):
        got = fresh(
            f"""
            import json, os, sys, threading, time
            import durable_obj
            from durable_obj.replica import server
            loading = threading.Event()
            real = server._chdb
            def _chdb():
                loading.set()
                return real()
            server._chdb = _chdb
            errors, versions = [], []
            def imports():
                loading.wait()
                time.sleep({delay})
                try:
                    import chdb
                    versions.append(chdb.engine_version)
                except BaseException as exc:
                    errors.append(type(exc).__name__)
            thread = threading.Thread(target=imports)
            thread.start()
            with durable_obj.open({str(tmp_path / f"o{delay}")!r}, owner="t") as obj:
                obj.execute("CREATE TABLE m (k String) ENGINE = MergeTree ORDER BY k")
                thread.join()
                zone = obj.query("SELECT serverTimezone()", "TSV").strip()
            finders = [type(f).__name__ for f in sys.meta_path].count("_Finder")
            print(json.dumps({{"errors": errors, "imported": len(versions), "zone": zone,
                               "finders": finders}}))
            """,
            TZ="Asia/Tokyo",
        )
        assert got == {"errors": [], "imported": 1, "zone": "UTC", "finders": 0}, delay


def test_chdb_imported_after_durable_obj_and_before_an_open_runs_in_utc(tmp_path: Path) -> None:
    """`import durable_obj`, then `import chdb`, then an open: chdb's package
    initialises on the engine module durable_obj loaded (in UTC), so the
    engine runs in UTC without the warning chdb imported first gets."""
    got = fresh(
        f"""
        import json, logging, sys
        import durable_obj
        import chdb
        warned = []
        class Seen(logging.Handler):
            def emit(self, record):
                warned.append(record.getMessage())
        logging.getLogger("durable_obj").addHandler(Seen())
        with durable_obj.open({str(tmp_path / "o")!r}, owner="t") as obj:
            zone = obj.query("SELECT serverTimezone()", "TSV").strip()
        print(json.dumps({{"zone": zone, "warned": [w for w in warned if "zone" in w],
                           "version": chdb.engine_version != "",
                           "finders": [type(f).__name__ for f in sys.meta_path].count("_Finder")}}))
        """,
        TZ="Asia/Tokyo",
    )
    if not sys.platform.startswith("linux"):
        return
    assert got == {"zone": "UTC", "warned": [], "version": True, "finders": 0}


def test_a_finder_that_asks_every_finder_in_turn_does_not_loop(tmp_path: Path) -> None:
    """A finder after `extension._Finder` that asks the other finders, as it
    does, is not asked back (found by attack: the two called each other
    until RecursionError); `import chdb` works beside it."""
    got = fresh(
        f"""
        import importlib.abc, json, sys
        import durable_obj

        class Asking(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path, target=None):
                if name != "chdb":
                    return None
                for finder in sys.meta_path:
                    if finder is not self:
                        spec = finder.find_spec(name, path, target)
                        if spec is not None:
                            return spec
                return None

        with durable_obj.open({str(tmp_path / "o")!r}, owner="t") as obj:
            sys.meta_path.insert(1, Asking())
            import chdb
            obj.execute("CREATE TABLE m (k String) ENGINE = MergeTree ORDER BY k")
            obj.execute("INSERT INTO m VALUES ('a')")
            rows = obj.query("SELECT count() FROM m", "TSV").strip()
        print(json.dumps({{"version": bool(chdb.engine_version), "rows": rows}}))
        """
    )
    assert got == {"version": True, "rows": "1"}


def test_an_open_beside_a_lazily_imported_chdb(tmp_path: Path) -> None:
    """chdb imported lazily (`importlib.util.LazyLoader`, as lazy-import
    helpers do) and not yet touched: the first open does not run it on the
    engine's start (found by attack: the open waited forever on itself),
    and the package runs, on the running engine, when first touched."""
    got = fresh(
        f"""
        import faulthandler, importlib.util, json, sys
        faulthandler.dump_traceback_later(60, exit=True)
        import durable_obj
        spec = importlib.util.find_spec("chdb")
        spec.loader = importlib.util.LazyLoader(spec.loader)
        chdb = importlib.util.module_from_spec(spec)
        sys.modules["chdb"] = chdb
        spec.loader.exec_module(chdb)
        with durable_obj.open({str(tmp_path / "o")!r}, owner="t") as obj:
            one = obj.query("SELECT 1", "TSV").strip()
            version = chdb.engine_version
            zone = obj.query("SELECT serverTimezone()", "TSV").strip()
        print(json.dumps({{"one": one, "version": bool(version), "zone": zone}}))
        """,
        TZ="Asia/Tokyo",
    )
    assert got == {"one": "1", "version": True, "zone": "UTC"}
