#!/usr/bin/env python3
"""The crate's public API as a sorted list, one item a line ("path kind"), from rustdoc's
JSON (`cargo +nightly rustdoc --lib --features ... -- -Z unstable-options --output-format
json`). Counted as issue 47 counts: functions and methods, types, traits, constants, macros,
modules; fields, variants and the items of trait impls are not. Items hidden from the docs are
not in the JSON.

    python3 .ci/public-api.py target/doc/gpu_event_pool.json > public-api.txt
"""
import json
import sys

KINDS = {"function", "struct", "enum", "union", "trait", "trait_alias", "constant", "static",
         "macro", "proc_macro", "module", "type_alias", "assoc_const", "assoc_type"}


def main(path):
    doc = json.load(open(path))
    index = doc["index"]
    seen, out, ids = set(), set(), set()

    def kind(item):
        return next(iter(item["inner"]))

    def visit(item_id, prefix):
        item = index.get(str(item_id))
        if item is None or item["crate_id"] != 0:
            return
        k = kind(item)
        inner = item["inner"][k]
        if k == "use":
            if inner.get("id") is not None and not inner.get("is_glob"):
                visit_as(inner["id"], prefix, inner["name"])
            elif inner.get("id") is not None:
                target = index.get(str(inner["id"]))
                if target and kind(target) == "module":
                    for child in target["inner"]["module"]["items"]:
                        visit(child, prefix)
            return
        visit_as(item_id, prefix, item["name"])

    def visit_as(item_id, prefix, name):
        item = index.get(str(item_id))
        if item is None or item["crate_id"] != 0:
            return
        k = kind(item)
        path = f"{prefix}::{name}" if prefix else name
        if (item_id, path) in seen:
            return
        seen.add((item_id, path))
        inner = item["inner"][k]
        if k in KINDS:
            out.add(f"{path} {k}")
            ids.add(item_id)
        if k == "module":
            for child in inner["items"]:
                visit(child, path)
        elif k == "trait":
            for child in inner["items"]:
                c = index.get(str(child))
                if c:
                    out.add(f"{path}::{c['name']} {kind(c)}")
                    ids.add(child)
        elif k in ("struct", "enum", "union"):
            for impl_id in inner.get("impls", []):
                impl = index.get(str(impl_id))
                if impl is None:
                    continue
                body = impl["inner"]["impl"]
                if body["trait"] is not None or body.get("is_synthetic") or body.get("blanket_impl"):
                    continue
                for child in body["items"]:
                    c = index.get(str(child))
                    if c and c["visibility"] == "public":
                        out.add(f"{path}::{c['name']} {kind(c)}")
                        ids.add(child)

    root = index[str(doc["root"])]
    for child in root["inner"]["module"]["items"]:
        visit(child, "gpu_event_pool")
    out.add("gpu_event_pool module")
    print(f"# {len(ids) + 1} public items at {len(out)} paths (.ci/public-api.py: what CI compares)")
    for line in sorted(out):
        print(line)


if __name__ == "__main__":
    main(sys.argv[1])
