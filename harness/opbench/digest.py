"""Implementation specs and their code digests (``impl_sha256``), computed statically.

A spec is ``path.py:function`` or ``dotted.module:function``. The digest is a sha256 of the function's
AST (without docstring and name) plus the module-level definitions it reaches, followed through imports
and re-exports: a verbatim or re-commented copy of the reference, or a re-export of it, gets the
reference's digest, so a rig comparing the reference with itself is visible to the auditor. The
candidate is never executed for this.
"""

from __future__ import annotations

import ast
import hashlib
import importlib.util
import os
import re
import sys
from pathlib import Path

from perfwarden.harness.opbench.inputs import OpBenchError


def parse_spec(spec: str) -> tuple[str, str, bool]:
    """``(target, function, is_file)`` of ``path.py:function`` or ``dotted.module:function``."""
    target, sep, name = spec.rpartition(":")
    if not sep or not target or not name.isidentifier():
        raise OpBenchError(f"implementation spec {spec!r} must look like 'path/to/file.py:function' or "
                           "'module:function'")
    return target, name, target.endswith(".py") or "/" in target or os.sep in target


def _module_file(module: str, near: Path | None) -> Path | None:
    """Source file of a module, found without executing untrusted code.

    Relative to the candidate's directory and on ``sys.path`` by plain file lookup; through the import
    system only for perfwarden's own modules (whose packages are trusted and may be path-mapped).
    """
    parts = module.split(".")
    roots = ([near] if near else []) + [Path(p) for p in sys.path if p]
    for root in roots:
        base = root.joinpath(*parts)
        for cand in (base.with_suffix(".py"), base / "__init__.py"):
            if cand.is_file():
                return cand
    if parts[0] == "perfwarden":
        try:
            spec = importlib.util.find_spec(module)
        except (ImportError, ValueError):
            return None
        if spec is not None and spec.origin and spec.origin.endswith(".py"):
            return Path(spec.origin)
    return None


def absolute_spec(spec: str) -> str:
    """The spec with its file made absolute (workers run in their own cwd); module specs unchanged."""
    target, name, is_file = parse_spec(spec)
    return f"{Path(target).resolve()}:{name}" if is_file else spec


def spec_file(spec: str) -> Path:
    """The source file an implementation spec points at."""
    target, _, is_file = parse_spec(spec)
    if is_file:
        path = Path(target).resolve()
        if not path.is_file():
            raise OpBenchError(f"implementation file {str(path)!r} (from {spec!r}) does not exist")
        return path
    found = _module_file(target, None)
    if found is None:
        raise OpBenchError(f"module {target!r} (from {spec!r}) has no source file")
    return found


class _Canon:
    """Canonical code of a function and the module-level definitions it reaches, for ``impl_digest``."""

    def __init__(self, max_depth: int = 4):
        self.max_depth = max_depth

    def digest(self, path: Path, name: str) -> str:
        parts = self._resolve(path, name, depth=0, top=True)
        if parts is None:
            # Not resolvable statically (built dynamically, imported from elsewhere): fall back to the
            # file's bytes plus the name, which still differs between different files.
            data = path.read_bytes()
            return "file:" + hashlib.sha256(data + b"\0" + name.encode()).hexdigest()
        return hashlib.sha256("\n".join(["pyfunc-v1", *parts]).encode()).hexdigest()

    def _resolve(self, path: Path, name: str, depth: int, top: bool) -> list[str] | None:
        if depth > self.max_depth:
            return None
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (OSError, SyntaxError, UnicodeDecodeError):
            return None
        defs = self._top_level(tree)
        node = defs.get(name)
        if node is None:
            return None
        if isinstance(node, (ast.ImportFrom, ast.Import)):
            return self._follow_import(path, node, name, depth)
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Name) and top:
            return self._resolve(path, node.value.id, depth + 1, top=True)  # ``rmsnorm = _impl``
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Attribute) and top:
            base = node.value.value
            if isinstance(base, ast.Name) and isinstance(defs.get(base.id), (ast.Import, ast.ImportFrom)):
                mod = self._imported_module(path, defs[base.id], base.id)
                if mod is not None:
                    return self._resolve(mod, node.value.attr, depth + 1, top=True)
            return None
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return None
        parts: list[str] = []
        seen: set[str] = set()
        self._closure(node, defs, parts, seen, top_name=True)
        return parts

    @staticmethod
    def _top_level(tree: ast.Module) -> dict[str, ast.AST]:
        defs: dict[str, ast.AST] = {}
        for stmt in tree.body:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                defs[stmt.name] = stmt
            elif isinstance(stmt, ast.Assign):
                for t in stmt.targets:
                    if isinstance(t, ast.Name):
                        defs[t.id] = stmt
            elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
                defs[stmt.target.id] = stmt
            elif isinstance(stmt, ast.ImportFrom):
                for alias in stmt.names:
                    defs[alias.asname or alias.name] = stmt
            elif isinstance(stmt, ast.Import):
                for alias in stmt.names:
                    defs[(alias.asname or alias.name).split(".")[0]] = stmt
        return defs

    def _imported_module(self, path: Path, node: ast.AST, bound: str) -> Path | None:
        if isinstance(node, ast.Import):
            for alias in node.names:
                if (alias.asname or alias.name).split(".")[0] == bound:
                    return _module_file(alias.name if alias.asname else alias.name.split(".")[0], path.parent)
        if isinstance(node, ast.ImportFrom):  # ``from pkg import module``
            for alias in node.names:
                if (alias.asname or alias.name) == bound:
                    return self._from_target(path, node, alias.name)
        return None

    def _from_target(self, path: Path, node: ast.ImportFrom, member: str) -> Path | None:
        module = node.module or ""
        if node.level:
            base = path.parent
            for _ in range(node.level - 1):
                base = base.parent
            full = base.joinpath(*module.split(".")) if module else base
            for cand in (full.with_suffix(".py"), full / "__init__.py", full / member / "__init__.py",
                         (full / member).with_suffix(".py")):
                if cand.is_file():
                    return cand
            return None
        return _module_file(f"{module}.{member}", path.parent) or _module_file(module, path.parent)

    def _follow_import(self, path: Path, node: ast.AST, name: str, depth: int) -> list[str] | None:
        if not isinstance(node, ast.ImportFrom):
            return None
        for alias in node.names:
            if (alias.asname or alias.name) != name:
                continue
            module = node.module or ""
            if node.level:
                base = path.parent
                for _ in range(node.level - 1):
                    base = base.parent
                full = base.joinpath(*module.split(".")) if module else base
                target = next((c for c in (full.with_suffix(".py"), full / "__init__.py") if c.is_file()), None)
            else:
                target = _module_file(module, path.parent)
            if target is None:
                return None
            return self._resolve(target, alias.name, depth + 1, top=True)
        return None

    def _closure(self, node: ast.AST, defs: dict[str, ast.AST], parts: list[str], seen: set[str],
                 top_name: bool) -> None:
        parts.append(self._dump(node, blank_name=top_name))
        local = self._bound_names(node)
        for ref in sorted({n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}):
            if ref in seen or ref in local or ref not in defs:
                continue
            seen.add(ref)
            dep = defs[ref]
            if isinstance(dep, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Assign, ast.AnnAssign)):
                self._closure(dep, defs, parts, seen, top_name=False)
            else:  # an import: its text (``import torch``) is part of what the code means
                parts.append(ast.dump(dep, include_attributes=False))

    @staticmethod
    def _bound_names(node: ast.AST) -> set[str]:
        names: set[str] = set()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            a = node.args
            for arg in a.posonlyargs + a.args + a.kwonlyargs + [x for x in (a.vararg, a.kwarg) if x]:
                names.add(arg.arg)
        for n in ast.walk(node):
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
                names.add(n.id)
        return names

    @staticmethod
    def _dump(node: ast.AST, blank_name: bool) -> str:
        node = ast.parse(ast.unparse(node)).body[0]  # a copy
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                    and isinstance(body[0].value.value, str):
                node.body = body[1:] or [ast.Pass()]
            if blank_name:
                node.name = "_"
        return ast.dump(node, include_attributes=False)


def impl_digest(spec: str) -> str:
    """sha256 of an implementation's code, computed statically (see the module docstring)."""
    _, name, _ = parse_spec(spec)
    return _Canon().digest(spec_file(spec), name)


_TRITON_IMPORT = re.compile(r"^\s*(import\s+triton\b|from\s+triton\b)", re.MULTILINE)


def uses_triton(spec: str) -> bool:
    """Whether the implementation's file imports triton (then it is a Triton kernel, timed only on GPU)."""
    try:
        return bool(_TRITON_IMPORT.search(spec_file(spec).read_text(encoding="utf-8", errors="replace")))
    except OSError:
        return False


_REFERENCE_NAMES = ("perfwarden.harness.ops.reference", "harness.ops.reference", "ops.reference")


def reaches_reference(spec: str) -> str | None:
    """Why a candidate's file reaches the reference implementation statically (an import of its module, an
    import of it from its package, or its module path or file name in a string), or None. Such a
    candidate compares the reference with itself whatever its digest."""
    path = spec_file(spec)
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, UnicodeDecodeError) as exc:
        return f"cannot read {path.name}: {type(exc).__name__}"
    inert = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)}
    for node in ast.walk(tree):  # a bare string statement (a docstring) does nothing and is not counted
        if isinstance(node, ast.Import) and any(a.name.endswith(_REFERENCE_NAMES) for a in node.names):
            return f"line {node.lineno}: imports the reference module"
        if isinstance(node, ast.ImportFrom):
            mod = node.module or ""
            if mod.endswith(_REFERENCE_NAMES) or (mod.endswith("ops") and any(a.name == "reference" for a in node.names)):
                return f"line {node.lineno}: imports from the reference module"
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in inert and (
                any(n in node.value for n in _REFERENCE_NAMES) or node.value.endswith("ops/reference.py")):
            return f"line {node.lineno}: names the reference module in a string"
    return None
