"""Map, plan, act: BFS over the integrated symbolic map toward mission subgoals.

A template of the OLE built-in agent, rendered by `ole.agents.builtin.mechanism.render`.
"""
import heapq
import random

from ole.agents.builtin.programs.prelude import ActionCodec  # inline

P: dict = {}  # params


OBJECTS = ["unseen", "empty", "wall", "floor", "door", "key", "ball", "box", "goal", "lava", "agent"]
COLORS = ["red", "green", "blue", "purple", "yellow", "grey"]
LEFT, RIGHT, FORWARD, PICKUP, DROP, TOGGLE = 0, 1, 2, 3, 4, 5
DIRS = [(1, 0), (0, 1), (-1, 0), (0, -1)]
OPEN, CLOSED, LOCKED = 0, 1, 2
WALK = {"empty", "floor", "goal"}
CARRY = {"key", "ball", "box"}


def parse_mission(text):
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


class Policy:
    """Map, plan, act: BFS over the integrated symbolic map toward mission subgoals."""

    def __init__(self, obs_space, action_space, env_meta):
        self.codec = ActionCodec(action_space)
        self.rng = random.Random(0)

    def reset(self, episode_index):
        self.map = {}
        self.pos = (0, 0)
        self.carrying = None
        self.last = None
        self.mission = None
        self.seen_pose = {}
        self.want_drop = False
        self.rng = random.Random(episode_index)

    def cell(self, p):
        return self.map.get(p, ("unseen", None, None))

    def integrate(self, obs):
        img = obs["image"]
        self.dir = int(obs["direction"])
        k = len(img)
        d = DIRS[self.dir]
        right = (-d[1], d[0])
        for vx in range(k):
            for vy in range(len(img[vx])):
                t, c, s = (int(v) for v in img[vx][vy])
                if t == 0:
                    continue
                f, r = (len(img[vx]) - 1) - vy, vx - k // 2
                p = (self.pos[0] + f * d[0] + r * right[0], self.pos[1] + f * d[1] + r * right[1])
                if f == 0 and r == 0:
                    continue
                self.map[p] = (OBJECTS[t] if t < len(OBJECTS) else "wall", COLORS[c] if c < len(COLORS) else None, s)

    def front(self):
        d = DIRS[self.dir]
        return (self.pos[0] + d[0], self.pos[1] + d[1])

    def track(self, obs):
        """Dead reckoning and inventory from the previous action and the new view."""
        if self.last is None:
            return
        action, before = self.last
        fp = self.front()
        if action == FORWARD and self.passable(before, False):
            d = DIRS[self.dir]
            self.pos = (self.pos[0] + d[0], self.pos[1] + d[1])
        elif action == PICKUP and before[0] in CARRY and self.carrying is None:
            now = self.view_front(obs)
            if now[0] in ("empty", "floor"):
                self.carrying = (before[0], before[1])
                self.map[fp] = ("empty", None, 0)
        elif action == DROP and self.carrying is not None:
            now = self.view_front(obs)
            if now[0] in CARRY:
                self.carrying = None

    def view_front(self, obs):
        img = obs["image"]
        k = len(img)
        t, c, s = (int(v) for v in img[k // 2][len(img[k // 2]) - 2])
        return (OBJECTS[t] if t < len(OBJECTS) else "wall", COLORS[c] if c < len(COLORS) else None, s)

    def passable(self, cell, through_objects):
        kind, color, state = cell
        if kind in WALK:
            return True
        if kind == "door":
            return state != LOCKED or (self.carrying is not None and self.carrying == ("key", color))
        return through_objects and kind in CARRY

    def path_to(self, targets, adjacent):
        """Cheapest path (list of cells) to a target cell, or to a cell next to one if adjacent."""
        goals = set(targets)
        if not goals:
            return None
        start = self.pos
        dist = {start: 0.0}
        prev = {}
        heap = [(0.0, start)]
        while heap:
            cost, p = heapq.heappop(heap)
            if cost > dist.get(p, 1e18):
                continue
            near = any((p[0] + dx, p[1] + dy) in goals for dx, dy in DIRS)
            if (adjacent and near) or (not adjacent and p in goals):
                out = [p]
                while out[-1] in prev:
                    out.append(prev[out[-1]])
                return out[::-1]
            for dx, dy in DIRS:
                q = (p[0] + dx, p[1] + dy)
                c = self.cell(q)
                step = 1.0
                if q in goals and not adjacent:
                    pass
                elif c[0] in CARRY:
                    step = P["obj_cost"][0]
                elif c[0] == "door" and c[2] != OPEN:
                    step = 1.0 + P["door_cost"][0]
                if q not in goals or adjacent:
                    if not self.passable(c, True):
                        continue
                if cost + step < dist.get(q, 1e18):
                    dist[q] = cost + step
                    prev[q] = p
                    heapq.heappush(heap, (cost + step, q))
        return None

    def turn_to(self, q):
        want = DIRS.index((q[0] - self.pos[0], q[1] - self.pos[1]))
        return RIGHT if (want - self.dir) % 4 == 1 else LEFT

    def step_along(self, path, final):
        """Action for the first move of a path; `final` acts on the target once facing it."""
        if len(path) == 1:
            if final is None:
                return None
            q = final
        else:
            q = path[1]
        if self.front() != q:
            return self.turn_to(q)
        c = self.cell(q)
        if len(path) == 1:
            return None
        if c[0] == "door" and c[2] != OPEN:
            return TOGGLE
        if c[0] in CARRY:
            return self.clear_front()
        return FORWARD

    def clear_front(self):
        """The object in front blocks the way: pick it up, or first drop what is carried."""
        if self.carrying is None:
            return PICKUP
        return self.drop_aside()

    def drop_aside(self):
        """Drop what is carried on a free neighbouring cell (turning to one first).

        The intention is sticky (`want_drop`) so that turning away from the target to
        find a free cell is not undone by turning back toward the target.
        """
        self.want_drop = True
        if self.droppable(self.front()):
            return DROP
        for dx, dy in DIRS:
            q = (self.pos[0] + dx, self.pos[1] + dy)
            if self.droppable(q):
                return self.turn_to(q)
        if self.cell(self.front())[0] in WALK:
            return FORWARD
        return self.rng.choice([LEFT, RIGHT])

    def droppable(self, q):
        """A free cell that blocks no doorway."""
        if self.cell(q)[0] not in ("empty", "floor"):
            return False
        return not any(self.cell((q[0] + dx, q[1] + dy))[0] == "door" for dx, dy in DIRS)

    def obstacle(self, targets):
        """First object cell on the cheapest path next to the targets, if the path needs one moved."""
        path = self.path_to(targets, True)
        if path is None:
            return None
        return next((q for q in path[1:] if self.cell(q)[0] in CARRY), None)

    def find(self, kind, color=None, state=None):
        return [p for p, c in self.map.items() if c[0] == kind and (color is None or c[1] == color)
                and (state is None or c[2] == state)]

    def act_on(self, targets, verb):
        """Go next to one of the targets, face it, then do `verb` (or step onto it for None)."""
        if verb is None:
            path = self.path_to(targets, False)
            if path is None:
                return None
            if len(path) == 1:
                return FORWARD
            return self.step_along(path, None)
        path = self.path_to(targets, True)
        if path is None:
            return None
        if len(path) == 1:
            t = next(t for t in targets if abs(t[0] - self.pos[0]) + abs(t[1] - self.pos[1]) == 1)
            if verb == PICKUP and self.carrying is not None:
                return self.drop_aside()
            if self.front() != t:
                return self.turn_to(t)
            return verb
        return self.step_along(path, None)

    def frontier(self):
        out = []
        for p, c in self.map.items():
            if self.passable(c, False) or p == self.pos:
                unknown = sum((p[0] + dx, p[1] + dy) not in self.map for dx, dy in DIRS)
                if unknown:
                    out.append(p)
        return out

    def plan(self):
        kind, obj, color = self.mission
        if kind in ("pickup", "goto") and obj != "goal":
            targets = self.find(obj, color)
            if targets:
                a = self.act_on(targets, PICKUP if kind == "pickup" else 6)
                if a is not None:
                    return a
        if kind == "open":
            targets = self.find("door", color)
            targets = [t for t in targets if self.cell(t)[2] != OPEN]
            if targets and not any(self.cell(t)[2] == LOCKED for t in targets):
                a = self.act_on(targets, TOGGLE)
                if a is not None:
                    return a
        if obj == "goal":
            goals = self.find("goal")
            if goals:
                a = self.act_on(goals, None)
                if a is not None:
                    return a
        return self.unlock() or self.explore()

    def unlock(self):
        locked = self.find("door", None, LOCKED)
        for door in locked:
            color = self.cell(door)[1]
            block = self.obstacle([door])
            if block is not None:
                if self.carrying is not None:
                    return self.drop_aside()
                a = self.act_on([block], PICKUP)
                if a is not None:
                    return a
            if self.carrying == ("key", color):
                a = self.act_on([door], TOGGLE)
                if a is not None:
                    return a
            keys = self.find("key", color)
            if keys:
                a = self.act_on(keys, PICKUP)
                if a is not None:
                    return a
        no_key = not self.find("key") and self.carrying is None
        if locked and (no_key or self.carrying and self.carrying[0] != "key"):
            boxes = self.find("box")
            if boxes:
                if self.carrying is not None:
                    return self.drop_aside()
                a = self.act_on(boxes, TOGGLE)
                if a is not None:
                    return a
        return None

    def explore(self):
        cells = self.frontier()
        if self.pos in cells and self.seen_pose.get((self.pos, self.dir), 0) < 2:
            return LEFT
        cells = [c for c in cells if c != self.pos]
        path = self.path_to(cells, False)
        if path is not None and len(path) > 1:
            return self.step_along(path, None)
        return self.rng.choice([LEFT, RIGHT, FORWARD, FORWARD])

    def act(self, obs):
        self.dir = int(obs["direction"])
        if self.mission is None:
            self.mission = parse_mission(str(obs.get("mission", "")))
        self.track(obs)
        self.integrate(obs)
        key = (self.pos, self.dir)
        self.seen_pose[key] = self.seen_pose.get(key, 0) + 1
        if self.seen_pose[key] > P["loop_limit"][0] and self.rng.random() < P["jitter"][0]:
            action = self.rng.choice([LEFT, RIGHT, FORWARD])
        elif self.want_drop and self.carrying is not None:
            action = self.drop_aside()
        else:
            self.want_drop = False
            action = self.plan()
        self.last = (action, self.cell(self.front()))
        return self.codec.choice(action)
