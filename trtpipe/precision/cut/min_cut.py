"""The smallest sink side of a minimum s-t cut, in near-linear time on the graphs fewest_casts builds.

A `CutGraph` has vertices 0 (`SOURCE`) and 1 (`SINK`) and edges of integer
capacity, `INFINITE` for an edge that must never be cut. `sink_side()` returns
the vertices that can still reach the sink in the residual graph of a maximum
flow: of all minimum cuts, the one with the fewest vertices on the sink side
(that set is the same for every maximum flow; the minimum cuts form a lattice and
this is its bottom). fewest_casts.py relies on exactly that set (see its `solve`).

Decisions (each one is about time; none changes the set returned):
- Independent components: SOURCE and SINK are shared, everything else splits into
  the components the other vertices form through their edges (an FP16 MatMul or an
  FP32 LayerNorm is a terminal, so a network falls apart at its fixed nodes). A
  component with no edge from the source carries no flow and needs no search; the
  others run Dinic's algorithm on their own small graph, so one phase of a long
  component never re-scans the rest of the network.
- Dinic: one breadth-first search per phase gives the levels, then augmenting paths
  run along strictly increasing levels with a per-vertex pointer to the next edge to
  try (a dead edge is never looked at twice in a phase). The search stops at the
  sink's level. On these graphs the flow is at most the number of Casts a plan needs
  and the phases at most the number of distinct augmenting path lengths.
- `phases` and `scans` count the breadth-first searches and the edges looked at:
  a test bounds them, so a change that makes a chain quadratic again fails
  without timing anything.
"""

from __future__ import annotations

SOURCE, SINK = 0, 1
INFINITE = -1  # replaced by (the sum of the finite capacities + 1) when solving


class CutGraph:
    def __init__(self) -> None:
        self.count = 2
        self.edges: list[tuple[int, int, int]] = []  # (tail, head, capacity)
        self.phases = 0
        self.scans = 0

    def add_vertex(self) -> int:
        self.count += 1
        return self.count - 1

    def add_edge(self, tail: int, head: int, capacity: int) -> None:
        if tail == head or tail == SINK or head == SOURCE or capacity == 0:
            return  # never cut: it cannot lie on a path from the source to the sink
        self.edges.append((tail, head, capacity))

    def sink_side(self) -> set[int]:
        """The smallest sink side of a minimum cut (SINK included)."""
        finite = sum(c for _, _, c in self.edges if c != INFINITE)
        infinite = finite + 1  # more than any cut made of finite edges
        side = {SINK}
        for vertices, edges in _components(self.count, self.edges):
            if not edges:
                continue  # an isolated vertex: source side
            flow = _Flow(len(vertices))
            local = {vertex: index + 2 for index, vertex in enumerate(vertices)}
            local[SOURCE], local[SINK] = SOURCE, SINK
            for tail, head, capacity in edges:
                flow.add_edge(local[tail], local[head], infinite if capacity == INFINITE else capacity)
            if flow.has_source_edge:
                flow.maximise()
            self.phases += flow.phases
            self.scans += flow.scans
            side.update(vertices[index - 2] for index in flow.reaching_sink() if index > SINK)
        return side


def _components(count: int, edges: list[tuple[int, int, int]]):
    """(vertices, edges) per component of the non-terminal vertices; SOURCE->SINK edges dropped."""
    parent = list(range(count))

    def root(vertex: int) -> int:
        while parent[vertex] != vertex:
            parent[vertex] = parent[parent[vertex]]  # path halving
            vertex = parent[vertex]
        return vertex

    for tail, head, _ in edges:
        if tail > SINK and head > SINK:
            a, b = root(tail), root(head)
            if a != b:
                parent[max(a, b)] = min(a, b)
    members: dict[int, list[int]] = {}
    for vertex in range(2, count):
        members.setdefault(root(vertex), []).append(vertex)
    grouped: dict[int, list[tuple[int, int, int]]] = {}
    for edge in edges:
        tail, head, _ = edge
        inner = tail if tail > SINK else head
        if inner > SINK:
            grouped.setdefault(root(inner), []).append(edge)
    for key, vertices in members.items():
        yield vertices, grouped.get(key, [])


class _Flow:
    """Dinic's maximum flow on one component; vertices 0 (source), 1 (sink), 2.. its own."""

    def __init__(self, inner: int) -> None:
        self.adjacent: list[list[int]] = [[] for _ in range(inner + 2)]
        self.head: list[int] = []  # edge -> target vertex; edge ^ 1 is its reverse
        self.capacity: list[int] = []
        self.has_source_edge = False
        self.phases = self.scans = 0

    def add_edge(self, tail: int, head: int, capacity: int) -> None:
        self.has_source_edge |= tail == SOURCE
        for vertex, target, cap in ((tail, head, capacity), (head, tail, 0)):
            self.adjacent[vertex].append(len(self.head))
            self.head.append(target)
            self.capacity.append(cap)

    def maximise(self) -> None:
        while (level := self._levels()) is not None:
            pointer = [0] * len(self.adjacent)
            while self._push(level, pointer):
                pass

    def _levels(self) -> list[int] | None:
        adjacent, capacity, head = self.adjacent, self.capacity, self.head  # locals: the hot loop
        self.phases += 1
        level = [-1] * len(adjacent)
        level[SOURCE] = 0
        frontier, depth, scans = [SOURCE], 0, 0
        while frontier and level[SINK] < 0:  # stop at the sink's level: deeper vertices are never used
            depth += 1
            reached = []
            for vertex in frontier:
                edges = adjacent[vertex]
                scans += len(edges)
                for edge in edges:
                    if capacity[edge] > 0 and level[head[edge]] < 0:
                        level[head[edge]] = depth
                        reached.append(head[edge])
            frontier = reached
        self.scans += scans
        return level if level[SINK] >= 0 else None

    def _push(self, level: list[int], pointer: list[int]) -> bool:
        """One augmenting path in the level graph (iterative DFS); False when there is none left."""
        adjacent, capacity, head = self.adjacent, self.capacity, self.head  # locals: the hot loop
        path: list[int] = []  # edges
        vertex = SOURCE
        scans = 0
        while True:
            if vertex == SINK:
                amount = min(capacity[e] for e in path)
                for edge in path:
                    capacity[edge] -= amount
                    capacity[edge ^ 1] += amount
                self.scans += scans + len(path)
                return True
            edges = adjacent[vertex]
            position, count, wanted = pointer[vertex], len(edges), level[vertex] + 1
            start = position
            while position < count:
                edge = edges[position]
                if capacity[edge] > 0 and level[head[edge]] == wanted:
                    break
                position += 1
            scans += position - start + 1
            pointer[vertex] = position
            if position == count:
                if not path:
                    self.scans += scans
                    return False
                level[vertex] = -1  # dead end
                edge = path.pop()
                vertex = head[edge ^ 1]
                pointer[vertex] += 1
                continue
            path.append(edge)
            vertex = head[edge]

    def reaching_sink(self) -> list[int]:
        """The vertices with a residual path to the sink (the sink included)."""
        adjacent, capacity, head = self.adjacent, self.capacity, self.head
        seen = [False] * len(adjacent)
        seen[SINK] = True
        stack, found = [SINK], [SINK]
        while stack:
            vertex = stack.pop()
            edges = adjacent[vertex]
            self.scans += len(edges)
            for edge in edges:  # edge: vertex -> other; edge ^ 1: other -> vertex
                other = head[edge]
                if not seen[other] and capacity[edge ^ 1] > 0:
                    seen[other] = True
                    stack.append(other)
                    found.append(other)
        return found
