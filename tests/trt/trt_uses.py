"""What TensorRT names a file of trtpipe/trt/ touches, read from its AST (for test_trt_surface.py).

In a file that imports TensorRT (`import tensorrt`, `from tensorrt import ...` or
`import_tensorrt()`), every attribute access `receiver.attr` is classified by its receiver:
- the `tensorrt` module (`trt`, `tensorrt`, `import tensorrt as t`, `t = trt`,
  `trt = import_tensorrt()`): a module-level name `(attr,)`;
- a TensorRT object whose class the tables tell: `(Class, attr)`. The class comes from an
  assignment in the same function (`x = engine`, `ctx = engine.create_execution_context()`
  via RETURNS, `engine = runner.engine` via POLYGRAPHY_ATTRIBUTES, `X` of
  `from tensorrt import X`), else from the receiver's variable name (RECEIVERS);
- a known non-TensorRT value: NOT_TENSORRT names (documented there), modules and names
  imported from anything but tensorrt, literals, containers, the results of methods of
  non-TensorRT values, subscripts of them;
- anything else (a loop variable `lay`, an unmapped method's result, an attribute of a
  TensorRT object that is not an enum) is *unknown*: the test fails naming file:line, so a
  TensorRT access can never escape the surface check by being spelled differently.
A variable's recorded binding wins over its name; the binding is per function (no flow).
"""

from __future__ import annotations

import ast
import builtins
from dataclasses import dataclass

MODULE_NAMES = ("trt", "tensorrt")
# Variable name -> TensorRT class (Python names; the inspector class is `EngineInspector` in every release).
RECEIVERS = {"network": "INetworkDefinition", "layer": "ILayer", "engine": "ICudaEngine",
             "inspector": "EngineInspector", "tensor": "ITensor", "context": "IExecutionContext",
             "config": "IBuilderConfig", "builder": "Builder", "parser": "OnnxParser"}
# Method -> class of what it returns, for chained access and assignments.
RETURNS = {"get_layer": "ILayer", "get_output": "ITensor", "get_input": "ITensor",
           "create_engine_inspector": "EngineInspector", "create_execution_context": "IExecutionContext",
           "create_network": "INetworkDefinition", "create_builder_config": "IBuilderConfig",
           "create_optimization_profile": "IOptimizationProfile", "deserialize_cuda_engine": "ICudaEngine"}
# Property -> enum class of its value (pybind11 enums have `.name`/`.value`).
ENUM_PROPERTIES = {"type": "LayerType", "dtype": "DataType", "precision": "DataType"}
ENUM_MEMBERS = ("name", "value")
# Attributes of Polygraphy objects that are TensorRT objects (polygraphy/backend/trt/runner.py:
# TrtRunner.activate_impl sets `self.engine`, `self.context`).
POLYGRAPHY_ATTRIBUTES = {"engine": "ICudaEngine", "context": "IExecutionContext"}
# Receivers known not to be TensorRT objects, by variable name. Every entry says what it is.
NOT_TENSORRT = {
    "self": "trtpipe's own class instances",
    "options": "trtpipe.trt.seam.BuildOptions",
    "plan": "the precision plan (a dict)",
    "node": "a plan node (a dict)", "n": "a plan node (a dict)",
    "availability": "trtpipe.trt.seam.Availability",
    "constraint": "trtpipe.trt.legacy.Constraint",
    "profile_class": "Polygraphy's Profile class (builder._profile's parameter)",
    "result": "trtpipe.trt.seam.BuildResult",
    "runner": "Polygraphy's TrtRunner (its TensorRT attributes are in POLYGRAPHY_ATTRIBUTES)",
    "G_LOGGER": "Polygraphy's logger",
    "metadata": "Polygraphy's TensorMetadata mapping (runner.get_input_metadata())",
    "DataType": "Polygraphy's polygraphy.datatype.DataType",
    "notes": "a list of strings",
    "error": "a Python exception",
    "name": "a str", "size": "an int", "version": "a str", "text": "a str", "line": "a str",
    "profile": "a dict of input name -> shapes", "spec": "a dict of shapes",
}
# Module-level functions that return the tensorrt module.
MODULE_FUNCTIONS = ("import_tensorrt",)

OTHER = ("other",)
MODULE = ("module",)


@dataclass(frozen=True)
class Use:
    file: str
    line: int
    names: tuple[str, ...]  # (class,) or (class, member)
    legacy_only: bool

    def where(self) -> str:
        return f"trtpipe/trt/{self.file}:{self.line} ({'.'.join(self.names)})"


def uses_tensorrt(tree: ast.AST) -> bool:
    """A file that imports `tensorrt` or calls `import_tensorrt()`: only there are `engine`, `layer`... TensorRT's."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import) and any(a.name.split(".")[0] == "tensorrt" for a in node.names):
            return True
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "tensorrt":
            return True
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in MODULE_FUNCTIONS:
            return True
    return False


class Scanner:
    """One file's TensorRT uses and the attribute accesses whose receiver it cannot classify."""

    def __init__(self, file: str, legacy_only: set[tuple[str, str]]) -> None:
        self.file, self.legacy_only = file, legacy_only
        self.uses: list[Use] = []
        self.unknown: list[str] = []
        self.strict = False

    def scan(self, tree: ast.AST) -> Scanner:
        self.strict = uses_tensorrt(tree)
        # trtpipe's own functions and classes return Python values.
        env = {n.name: OTHER for n in getattr(tree, "body", []) if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
        self._block(tree, env, False)
        return self

    # Kinds: MODULE, ("trt", Class), OTHER, or None (unknown).
    def kind(self, node: ast.AST, env: dict) -> tuple | None:
        if isinstance(node, ast.Name):
            if node.id in env:
                return env[node.id]
            if node.id in MODULE_NAMES:
                return MODULE
            if node.id in RECEIVERS:
                return ("trt", RECEIVERS[node.id])
            if node.id in NOT_TENSORRT or hasattr(builtins, node.id):
                return OTHER
            return None
        if isinstance(node, ast.Attribute):
            owner = self.kind(node.value, env)
            if owner == MODULE:  # trt.X used as a value: X is a class or enum (trt.__version__: a str)
                return OTHER if node.attr.startswith("__") else ("trt", node.attr)
            if owner == OTHER:
                return ("trt", POLYGRAPHY_ATTRIBUTES[node.attr]) if _is_runner(node.value, env) \
                    and node.attr in POLYGRAPHY_ATTRIBUTES else OTHER
            if owner and node.attr in ENUM_PROPERTIES:
                return ("trt", ENUM_PROPERTIES[node.attr])
            if owner and node.attr in ENUM_MEMBERS:
                return OTHER  # an enum member's name (str) or value (int)
            return None
        if isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Name):
                if func.id in MODULE_FUNCTIONS:
                    return MODULE
                return OTHER if self.kind(func, env) == OTHER else None
            if isinstance(func, ast.Attribute):
                owner = self.kind(func.value, env)
                if owner == OTHER:
                    return OTHER
                if owner and owner != MODULE and func.attr in RETURNS:
                    return ("trt", RETURNS[func.attr])
            return None
        if isinstance(node, ast.Subscript):
            return OTHER if self.kind(node.value, env) == OTHER else None
        if isinstance(node, (ast.Constant, ast.JoinedStr, ast.List, ast.Tuple, ast.Dict, ast.Set, ast.ListComp,
                             ast.DictComp, ast.SetComp, ast.GeneratorExp, ast.Compare, ast.BinOp)):
            return OTHER
        return None

    def _bind(self, target: ast.AST, kind: tuple | None, env: dict) -> None:
        if isinstance(target, ast.Name):
            if kind is not None:
                env[target.id] = kind
            elif target.id in RECEIVERS or target.id in MODULE_NAMES or target.id in NOT_TENSORRT:
                env.pop(target.id, None)  # bound to something unknown: known by its name only
            else:
                env[target.id] = None  # bound to something unknown: unknown (not a builtin of that name)
        elif isinstance(target, (ast.Tuple, ast.List)):
            for element in target.elts:  # unpacking: a Python value's parts are Python values, except
                self._bind(element, OTHER if kind == OTHER and getattr(element, "id", None) not in RECEIVERS
                           else None, env)  # names RECEIVERS gives a class (TensorRT's objects from a loader)

    def _block(self, node: ast.AST, env: dict, legacy: bool) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            legacy = legacy or (self.file, getattr(node, "name", "")) in self.legacy_only
            env = dict(env)
            for arg in (*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs):
                env.pop(arg.arg, None)  # a parameter is known by its name only
            if isinstance(node, ast.Lambda):
                self._visit(node.body, env, legacy)
                return
        if isinstance(node, ast.Import):
            for alias in node.names:
                bound = alias.asname or alias.name.split(".")[0]
                env[bound] = MODULE if alias.name.split(".")[0] == "tensorrt" else OTHER
        elif isinstance(node, ast.ImportFrom):
            from_trt = (node.module or "").split(".")[0] == "tensorrt"
            for alias in node.names:
                env[alias.asname or alias.name] = ("trt", alias.name) if from_trt else OTHER
                if from_trt:
                    self.uses.append(Use(self.file, node.lineno, (alias.name,), legacy))
        elif isinstance(node, ast.ExceptHandler) and node.name:
            env[node.name] = OTHER  # a Python exception
        elif isinstance(node, ast.Assign):
            self._visit(node.value, env, legacy)
            for target in node.targets:
                self._bind(target, self.kind(node.value, env), env)
                self._visit(target, env, legacy, store=True)
            return
        elif isinstance(node, (ast.For, ast.AsyncFor)):
            self._visit(node.iter, env, legacy)
            self._bind(node.target, None, env)  # a loop variable: by its name only
            for child in ast.iter_child_nodes(node):
                if child is not node.iter and child is not node.target:
                    self._block(child, env, legacy)
            return
        elif isinstance(node, ast.withitem) and node.optional_vars is not None:
            self._visit(node.context_expr, env, legacy)
            self._bind(node.optional_vars, self.kind(node.context_expr, env), env)
            return
        elif isinstance(node, ast.expr):
            self._visit(node, env, legacy)
            return
        for child in ast.iter_child_nodes(node):
            self._block(child, env, legacy)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            env[node.name] = OTHER  # trtpipe's own functions return Python values

    def _visit(self, node: ast.AST, env: dict, legacy: bool, store: bool = False) -> None:
        """Record the uses in one expression (comprehensions bind their own variables)."""
        if isinstance(node, (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)):
            inner = dict(env)
            for generator in node.generators:
                self._visit(generator.iter, inner, legacy)
                self._bind(generator.target, None, inner)
                for condition in generator.ifs:
                    self._visit(condition, inner, legacy)
            parts = [node.key, node.value] if isinstance(node, ast.DictComp) else [node.elt]
            for part in parts:
                self._visit(part, inner, legacy)
            return
        if isinstance(node, ast.Lambda):
            self._block(node, env, legacy)
            return
        if isinstance(node, ast.Attribute) and not node.attr.startswith("__"):
            self._attribute(node, env, legacy)
        if isinstance(node, ast.Call):
            self._getattr_call(node, env, legacy)
        for child in ast.iter_child_nodes(node):
            self._visit(child, env, legacy)

    def _attribute(self, node: ast.Attribute, env: dict, legacy: bool) -> None:
        owner = self.kind(node.value, env)
        if owner == MODULE:
            self.uses.append(Use(self.file, node.lineno, (node.attr,), legacy))
        elif owner == OTHER or not self.strict:
            return
        elif owner is None:
            self.unknown.append(f"trtpipe/trt/{self.file}:{node.lineno}: the TensorRT class of "
                                f"`{ast.unparse(node.value)}` (for .{node.attr}) is unknown")
        elif not (owner[1] in ENUM_PROPERTIES.values() and node.attr in ENUM_MEMBERS):
            self.uses.append(Use(self.file, node.lineno, (owner[1], node.attr), legacy))

    def _getattr_call(self, node: ast.Call, env: dict, legacy: bool) -> None:
        if not (isinstance(node.func, ast.Name) and node.func.id in ("getattr", "hasattr") and len(node.args) >= 2
                and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str)):
            return
        name = node.args[1].value
        if name.startswith("__"):
            return  # the module's own __version__, not a binding
        owner = self.kind(node.args[0], env)
        if owner == MODULE:
            self.uses.append(Use(self.file, node.lineno, (name,), legacy))
        elif owner not in (None, OTHER) and (self.strict or isinstance(node.args[0], ast.Attribute)):
            self.uses.append(Use(self.file, node.lineno, (owner[1], name), legacy))
        elif owner is None and self.strict:
            self.unknown.append(f"trtpipe/trt/{self.file}:{node.lineno}: the TensorRT class of "
                                f"`{ast.unparse(node.args[0])}` (for {node.func.id} {name!r}) is unknown")


def _is_runner(node: ast.AST, env: dict) -> bool:
    return isinstance(node, ast.Name) and node.id == "runner"
