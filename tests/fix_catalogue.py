"""Every "Fix:" the code base can print, found in the source (not by running it).

A fix is the second argument of a `UserError(problem, fix)` call, or a string
literal holding "Fix:" (warnings, the TensorRT seam). Its key names where it is:
`<file>:<function>: <problem template>`, the template being the problem's text with
each interpolated value written `{}` (for a problem passed as a variable, its name
in angle brackets). tests/test_fixes_paste.py holds one row per key.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "trtpipe"


def template(node: ast.expr) -> str:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return " ".join(node.value.split())
    if isinstance(node, ast.JoinedStr):
        return " ".join("".join(part.value if isinstance(part, ast.Constant) else "{}"
                                for part in node.values).split())
    return f"<{ast.unparse(node)}>"


def _functions(tree: ast.AST) -> dict[ast.AST, str]:
    """Each node -> the name of the innermost function (or class body) holding it."""
    owner: dict[ast.AST, str] = {}

    def visit(node: ast.AST, name: str) -> None:
        for child in ast.iter_child_nodes(node):
            inner = child.name if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else name
            owner[child] = inner
            visit(child, inner)

    visit(tree, "<module>")
    return owner


def collected_fixes() -> dict[str, str]:
    """key -> the fix's source text."""
    found: dict[str, str] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        owner = _functions(tree)
        pieces = {id(part) for node in ast.walk(tree) if isinstance(node, ast.JoinedStr) for part in node.values}
        where = f"{path.relative_to(PACKAGE.parent)}:"
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "UserError" and node.args:
                fix = node.args[1] if len(node.args) > 1 else next(
                    (k.value for k in node.keywords if k.arg == "fix"), None)
                if fix is not None:
                    found[f"{where}{owner[node]}: {template(node.args[0])}"] = ast.unparse(fix)
            elif isinstance(node, (ast.Constant, ast.JoinedStr)) and id(node) not in pieces \
                    and "Fix:" in template(node) and path.name != "errors.py":
                found[f"{where}{owner[node]}: {template(node)}"] = template(node)
    return found
