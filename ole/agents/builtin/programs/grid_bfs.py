"""Map, plan, act in a symbolic grid world: turn-aware shortest paths toward mission subgoals.

A template of the OLE built-in agent, rendered by `ole.agents.builtin.mechanism.render`.
The egocentric views are integrated into a map by dead reckoning; what the agent carries
is read from its own cell of the view. Every step one Dijkstra search over (cell,
heading) states prices turns, moves, doors and objects in the way; the plan then takes
the cheapest of: the mission target; opening a locked door with its key (fetching the
key, or opening boxes that may hold it); exploring a frontier, priced by its cost minus
the unknown cells it would reveal. Objects in the way are picked up and put aside.
"""
import heapq
import random

from ole.agents.builtin.programs.prelude import ActionCodec  # inline

P: dict = {}  # params


OBJECTS = ["unseen", "empty", "wall", "floor", "door", "key", "ball", "box", "goal", "lava", "agent"]
COLORS = ["red", "green", "blue", "purple", "yellow", "grey"]
LEFT, RIGHT, FORWARD, PICKUP, DROP, TOGGLE, DONE = 0, 1, 2, 3, 4, 5, 6
DIRS = [(1, 0), (0, 1), (-1, 0), (0, -1)]
OPEN, CLOSED, LOCKED = 0, 1, 2
WALK = {"empty", "floor", "goal"}
CARRY = {"key", "ball", "box"}
UNKNOWN = ("unseen", None, None)
FAR = 1e18


def parse_mission(text):
    """(verb, object, colour) of a MiniGrid mission; reaching the goal square when nothing else is asked."""
    words = text.lower().replace(",", " ").split()
    goal = None
    for verb, kind in (("pick", "pickup"), ("open", "open"), ("go", "goto"), ("put", "pickup")):
        if verb in words:
            i = words.index(verb)
            rest = [w for w in words[i + 1:] if w not in ("up", "the", "a", "to", "next")]
            color = next((w for w in rest if w in COLORS), None)
            obj = next((w for w in rest if w in OBJECTS), None)
            if obj and goal is None:
                goal = (kind, obj, color)
    later = "then" in words or "reach" in words or "get" in words
    if "goal" in words and (goal is None or goal[1] != "goal" and later):
        goal = ("reach", "goal", None)
    return goal or ("reach", "goal", None)


def ahead(p, d, k):
    """The cell k steps from p in heading d."""
    return (p[0] + k * DIRS[d][0], p[1] + k * DIRS[d][1])


class Policy:
    """Integrated map, Dijkstra over (cell, heading), priced subgoals."""

    def __init__(self, obs_space, action_space, env_meta):
        self.codec = ActionCodec(action_space)
        self.rng = random.Random(0)

    def reset(self, episode_index):
        self.map = {}
        self.pos = (0, 0)
        self.dir = 0
        self.carrying = None
        self.last = None
        self.mission = None
        self.visits = {}
        self.rng = random.Random(episode_index)

    # ---- perception ----------------------------------------------------------------
    def cell(self, p):
        return self.map.get(p, UNKNOWN)

    def decode(self, value):
        t, c, s = (int(v) for v in value)
        return (OBJECTS[t] if t < len(OBJECTS) else "wall", COLORS[c] if c < len(COLORS) else None, s)

    def integrate(self, obs):
        """Add the egocentric view to the map; the agent's own cell shows what it carries."""
        img = obs["image"]
        k = len(img)
        d = DIRS[self.dir]
        right = (-d[1], d[0])
        for vx in range(k):
            for vy in range(len(img[vx])):
                kind = self.decode(img[vx][vy])
                f, r = (len(img[vx]) - 1) - vy, vx - k // 2
                if f == 0 and r == 0:
                    self.carrying = (kind[0], kind[1]) if kind[0] in CARRY else None
                    continue
                if kind[0] == "unseen":
                    continue
                p = (self.pos[0] + f * d[0] + r * right[0], self.pos[1] + f * d[1] + r * right[1])
                self.map[p] = kind

    def track(self):
        """Dead reckoning from the previous action (a move succeeds into a passable cell)."""
        if self.last is not None and self.last[0] == FORWARD and self.passable(self.last[1]):
            self.pos = ahead(self.pos, self.dir, 1)

    def passable(self, cell):
        kind, color, state = cell
        return kind in WALK or kind == "door" and state == OPEN

    # ---- planning ------------------------------------------------------------------
    def enter_cost(self, cell):
        """Planning cost of entering a cell (None: not through it)."""
        kind, color, state = cell
        if kind in WALK or kind == "door" and state == OPEN:
            return 1.0
        if kind == "door" and (state == CLOSED or self.carrying == ("key", color)):
            return 1.0 + P["door_cost"][0]
        if kind in CARRY:
            return P["obj_cost"][0]
        return None

    def search(self):
        """Cheapest cost and first action to every reachable (cell, heading) state."""
        start = (self.pos, self.dir)
        best, first, prev = {start: 0.0}, {start: None}, {}
        heap, n = [(0.0, 0, start)], 0
        turn = P["turn_cost"][0]
        while heap:
            cost, _, state = heapq.heappop(heap)
            if cost > best[state]:
                continue
            p, d = state
            moves = [((p, (d - 1) % 4), turn, LEFT), ((p, (d + 1) % 4), turn, RIGHT)]
            step = self.enter_cost(self.cell(ahead(p, d, 1)))
            if step is not None:
                moves.append(((ahead(p, d, 1), d), step, FORWARD))
            for nxt, c, action in moves:
                if cost + c < best.get(nxt, FAR):
                    best[nxt] = cost + c
                    first[nxt] = action if first[state] is None else first[state]
                    prev[nxt] = state
                    n += 1
                    heapq.heappush(heap, (cost + c, n, nxt))
        self.best, self.first, self.prev = best, first, prev

    def obstacle(self, state):
        """The first object cell on the cheapest path to `state` (None when the way is clear)."""
        cells = []
        while state in self.prev:
            cells.append(state[0])
            state = self.prev[state]
        return next((c for c in reversed(cells) if self.cell(c)[0] in CARRY), None)

    def facing(self, targets):
        """(cost, state) of the cheapest state facing one of the target cells."""
        goals = set(targets)
        options = [(c, s) for s, c in self.best.items() if ahead(s[0], s[1], 1) in goals
                   and (s[0] == self.pos or self.passable(self.cell(s[0])) or self.cell(s[0])[0] in CARRY)]
        return min(options, default=(FAR, None))

    def reaching(self, targets):
        goals = set(targets)
        return min(((c, s) for s, c in self.best.items() if s[0] in goals), default=(FAR, None))

    def toward(self, state):
        """The next action on the cheapest path to `state`, clearing doors and objects in the way."""
        action = self.first.get(state)
        if action != FORWARD:
            return action
        kind, color, status = self.cell(ahead(self.pos, self.dir, 1))
        if kind == "door" and status != OPEN:
            return TOGGLE
        if kind in CARRY:
            return PICKUP if self.carrying is None else self.put_down()
        return FORWARD

    def interact(self, targets, verb):
        """Face one of the targets, then apply `verb` (hands are emptied first for a pickup)."""
        cost, state = self.facing(targets)
        if state is None:
            return None
        if verb == PICKUP and self.carrying is not None:
            return self.put_down()
        if state == (self.pos, self.dir):
            return verb
        return self.toward(state)

    def put_down(self):
        """Drop what is carried on a free cell that blocks no doorway (turning to one first)."""
        if self.droppable(ahead(self.pos, self.dir, 1)):
            return DROP
        for turn, action in ((1, RIGHT), (3, LEFT), (2, RIGHT)):
            if self.droppable(ahead(self.pos, (self.dir + turn) % 4, 1)):
                return action
        if self.passable(self.cell(ahead(self.pos, self.dir, 1))):
            return FORWARD
        return self.rng.choice([LEFT, RIGHT])

    def droppable(self, q):
        if self.cell(q)[0] not in ("empty", "floor"):
            return False
        return not any(self.cell(ahead(q, d, 1))[0] == "door" for d in range(4))

    def find(self, kind, color=None, state=None):
        return [p for p, c in self.map.items() if c[0] == kind and (color is None or c[1] == color)
                and (state is None or c[2] == state)]

    # ---- subgoals ------------------------------------------------------------------
    def frontier(self):
        """(score, state) of the best state to explore from: its cost minus the unknown cells it reveals."""
        info = P["info"][0]
        reach = max(1, int(round(P["reach"][0])))
        side = range(-(reach // 2), reach // 2 + 1)
        best = (FAR, None)
        for state, cost in self.best.items():
            p, d = state
            kind, _, status = self.cell(p)
            if not (self.passable(self.cell(p)) or kind == "door" and status == CLOSED) and p != self.pos:
                continue
            if all(ahead(p, e, 1) in self.map for e in range(4)) and self.cell(ahead(p, d, 1)) != UNKNOWN:
                continue
            gain = sum(self.cell((p[0] + k * DIRS[d][0] + r * DIRS[(d + 1) % 4][0],
                                  p[1] + k * DIRS[d][1] + r * DIRS[(d + 1) % 4][1])) == UNKNOWN
                       for k in range(1, reach + 1) for r in side)
            if gain and cost - info * gain < best[0]:
                best = (cost - info * gain, state)
        return best

    def needed(self, item):
        """Whether a carried item serves a goal: the mission object or the key of a known locked door."""
        verb, obj, color = self.mission
        if item[0] == obj and (color is None or item[1] == color):
            return True
        return item[0] == "key" and any(self.cell(d)[1] == item[1] for d in self.find("door", None, LOCKED))

    def unlock_options(self):
        """(cost, action) options that work toward opening a locked door.

        A door whose approach is blocked is cleared first with empty hands; then its key
        is fetched (boxes are opened when no key of its colour is known), then it is opened.
        """
        out = []
        for door in self.find("door", None, LOCKED):
            color = self.cell(door)[1]
            cost, state = self.facing([door])
            block = self.obstacle(state) if state is not None else None
            if block is not None:
                if self.carrying is not None:
                    out.append((cost, self.put_down))
                else:
                    out.append((cost, lambda block=block: self.interact([block], PICKUP)))
            elif self.carrying == ("key", color):
                out.append((cost, lambda door=door: self.interact([door], TOGGLE)))
            elif self.find("key", color):
                keys = self.find("key", color)
                c, _ = self.facing(keys)
                out.append((c + (2.0 if self.carrying else 0.0), lambda keys=keys: self.interact(keys, PICKUP)))
            elif self.find("box"):
                boxes = self.find("box")
                c, _ = self.facing(boxes)
                out.append((c + P["box_bias"][0], lambda boxes=boxes: self.interact(boxes, TOGGLE)))
        return out

    def plan(self):
        verb, obj, color = self.mission
        if verb in ("pickup", "goto") and obj != "goal":
            targets = self.find(obj, color)
            if targets:
                a = self.interact(targets, PICKUP if verb == "pickup" else DONE)
                if a is not None:
                    return a
        if verb == "open":
            doors = [t for t in self.find("door", color) if self.cell(t)[2] == CLOSED]
            if doors:
                a = self.interact(doors, TOGGLE)
                if a is not None:
                    return a
        if obj == "goal":
            cost, state = self.reaching(self.find("goal"))
            if state is not None:
                return self.toward(state) if state[0] != self.pos else FORWARD
        options = self.unlock_options()
        score, state = self.frontier()
        if state is not None:
            options.append((score + P["explore_bias"][0], lambda: self.toward(state)))
        for _, choose in sorted(options, key=lambda o: o[0]):
            a = choose()
            if a is not None:
                return a
        return self.rng.choice([LEFT, RIGHT, FORWARD, FORWARD])

    def act(self, obs):
        self.dir = int(obs["direction"])
        if self.mission is None:
            self.mission = parse_mission(str(obs.get("mission", "")))
        self.track()
        self.integrate(obs)
        key = (self.pos, self.dir)
        self.visits[key] = self.visits.get(key, 0) + 1
        if self.visits[key] > P["loop_limit"][0] and self.rng.random() < P["jitter"][0]:
            action = self.rng.choice([LEFT, RIGHT, FORWARD])
        else:
            self.search()
            action = self.plan()
            if action is None:
                action = self.rng.choice([LEFT, RIGHT, FORWARD])
        self.last = (action, self.cell(ahead(self.pos, self.dir, 1)))
        return self.codec.choice(action)
