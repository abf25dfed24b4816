"""Make a nats.js (v3) checkout's Deno tests runnable with only the npm registry reachable.

Its deno.json / import_map.json files import @std/* and @nats-io/{nkeys,nuid,jwt} from JSR
and the @nats-io/* modules of the repository itself from JSR too. This rewrites them in
place: the repository's own modules to its sources, nkeys/nuid/jwt to the same versions on
npm, and the few @std functions the tests use to the small stand-ins in ``std/``. Imports
only tooling needs (esbuild loaders, cobra, dax, ...) are dropped.

    python rewrite_imports.py NATS_JS_CHECKOUT
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

SHIMS = Path(__file__).resolve().parent / "std"
LOCAL = {
    "@nats-io/nats-core": "core/src/mod.ts",
    "@nats-io/nats-core/internal": "core/src/internal_mod.ts",
    "@nats-io/jetstream": "jetstream/src/mod.ts",
    "@nats-io/jetstream/internal": "jetstream/src/internal_mod.ts",
    "@nats-io/kv": "kv/src/mod.ts",
    "@nats-io/kv/internal": "kv/src/internal_mod.ts",
    "@nats-io/obj": "obj/src/mod.ts",
    "@nats-io/obj/internal": "obj/src/internal_mod.ts",
    "@nats-io/transport-deno": "transport-deno/src/mod.ts",
}
NPM = {
    "@nats-io/nkeys": "npm:@nats-io/nkeys@2.0.3",
    "@nats-io/nuid": "npm:@nats-io/nuid@3.0.0",
    "@nats-io/jwt": "npm:@nats-io/jwt@0.0.11",
}
STD = {
    "@std/assert": "assert.ts",
    "@std/fmt": "colors.ts",
    "@std/fmt/colors": "colors.ts",
    "@std/bytes": "bytes.ts",
    "@std/path": "path.ts",
    "@std/io": "io.ts",
}


def _fixed(imports: dict[str, Any], src: Path) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, target in imports.items():
        if name in LOCAL:
            out[name] = (src / LOCAL[name]).as_uri()
        elif name in NPM:
            out[name] = NPM[name]
        elif name in STD:
            out[name] = (SHIMS / STD[name]).as_uri()
        elif isinstance(target, str) and target.startswith(("jsr:", "http")):
            continue
        else:
            out[name] = target
    for name, shim in STD.items():
        out.setdefault(name, (SHIMS / shim).as_uri())
    return out


def rewrite(src: Path) -> None:
    files = [src / "deno.json", *src.glob("*/deno.json"), *src.glob("*/import_map.json")]
    for path in files:
        doc = json.loads(path.read_text())
        if "imports" in doc:
            doc["imports"] = _fixed(doc["imports"], src)
        for scope in doc.get("scopes", {}).values():
            scope.update({k: v for k, v in _fixed(scope, src).items() if k in scope})
        path.write_text(json.dumps(doc, indent=2))


if __name__ == "__main__":
    rewrite(Path(sys.argv[1]).resolve())
