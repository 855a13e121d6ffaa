# The judge of assert-style code tests (MBPP test_list, HumanEval check()): the verdict is reached
# in this process, where the program under test cannot reach it. Before the judge reads its job, it
# makes itself undumpable (no ptrace, no /proc/<pid>/mem or fd access by the same user) and forks the
# candidate: a child that knows nothing of the tests or the nonce. The child runs the setup and the
# program and answers calls over two pipes; the tests run here, on proxies of the program's names.
# Only plain data (None, bool, int, float, complex, str, bytes, and lists, tuples, dicts, sets of
# them, Fraction, Decimal) crosses from the child: an object of the program's own is a handle that
# can be called, read and iterated, but never equals, orders against or contains a value of the
# judge's, so `__eq__ = lambda *a: True` and patched builtins, asserts or exits score nothing.
#
# stdin: {"setup", "program", "tests", "entry_point", "nonce"}. stdout, last line:
# "<nonce> <1|0 per test> <how the candidate ended: alive | exit N | signal N>".
# Messages on the pipes: 4-byte big-endian length + JSON. Requests {"q": op, ...}; answers
# {"r": value} or {"e": [builtin exception name, message]}. Compiled into unstuck as a string
# (src/core_sources.cmake); it must contain no at-sign.
import json
import os
import sys

kMaxMessage = 64 << 20  # bytes; a larger answer fails the test that asked for it
kMaxDepth = 200  # nesting of an encoded value


def write_all(fd, data):
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def send(fd, message):
    body = json.dumps(message, separators=(",", ":")).encode("utf-8", "surrogatepass")
    write_all(fd, len(body).to_bytes(4, "big") + body)


def read_exact(fd, n):
    chunks, left = [], n
    while left:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            raise EOFError("the program under test ended")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def receive(fd):
    size = int.from_bytes(read_exact(fd, 4), "big")
    if size > kMaxMessage:
        raise ValueError("an answer of %d bytes" % size)
    return json.loads(read_exact(fd, size).decode("utf-8", "surrogatepass"))


# ---- the candidate's side (untrusted once the program has run) ----

def candidate(down, up):
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
    os.dup2(2, 1)  # the program's prints go to the job's stderr (diagnostics, bounded by output_kb)
    for fd in range(3, 1 << 10):
        if fd not in (down, up):
            try:
                os.close(fd)
            except OSError:
                pass
    objects = []  # handles: index -> object

    def handle(v):
        objects.append(v)
        return ["H", len(objects) - 1]

    def enc(v, depth=0):
        if depth > kMaxDepth:
            raise ValueError("a value nested deeper than %d" % kMaxDepth)
        if v is None or v is True or v is False:
            return v
        d = depth + 1
        if isinstance(v, bool):
            return bool(v)
        if isinstance(v, int):
            return ["i", format(int.__index__(v), "x")]
        if isinstance(v, float):
            return ["f", float.__repr__(float(v))]
        if isinstance(v, complex):
            return ["c", float.__repr__(complex.__complex__(v).real), float.__repr__(complex.__complex__(v).imag)]
        if isinstance(v, str):
            return str.__getitem__(v, slice(None))
        if isinstance(v, bytes):
            return ["b", bytes.hex(v)]
        if isinstance(v, bytearray):
            return ["B", bytearray.hex(v)]
        if isinstance(v, tuple):
            return ["t", [enc(x, d) for x in tuple.__iter__(v)]]
        if isinstance(v, list):
            return ["l", [enc(x, d) for x in list.__iter__(v)]]
        if isinstance(v, frozenset):
            return ["F", [enc(x, d) for x in frozenset.__iter__(v)]]
        if isinstance(v, set):
            return ["s", [enc(x, d) for x in set.__iter__(v)]]
        if isinstance(v, dict):
            return ["d", [[enc(k, d), enc(dict.__getitem__(v, k), d)] for k in dict.__iter__(v)]]
        module = type(v).__module__
        if module == "fractions" and type(v).__name__ == "Fraction":
            return ["q", enc(v.numerator, d), enc(v.denominator, d)]
        if module == "decimal" and type(v).__name__ == "Decimal":
            return ["D", str(v)]
        if module == "numpy" and hasattr(v, "item") and getattr(v, "ndim", None) == 0:
            return enc(v.item(), d)  # numpy scalars, as their Python value
        if isinstance(v, type(os)):
            return ["M", v.__name__]
        return handle(v)

    class JudgeObject:  # something of the judge's (a lambda of the tests): it can only be called
        __slots__ = ("ref",)

        def __init__(self, ref):
            self.ref = ref

        def __call__(self, *args, **kwargs):
            return ask(["call", self.ref, [enc(a) for a in args], {k: enc(a) for k, a in kwargs.items()}])

    def other(x):
        if x[0] == "H":
            return objects[x[1]]
        if x[0] == "J":
            return JudgeObject(x[1])
        raise ValueError("not a value")

    def dec(x):
        return decode_plain(x, other)

    def ask(request):  # a call of the judge's object, serving the judge's calls meanwhile
        send(up, {"q": request})
        return serve_until_answer()

    def answer(request):
        op, target = request[0], request[1]
        if op == "call":
            return objects[target](*[dec(a) for a in request[2]], **{k: dec(a) for k, a in request[3].items()})
        if op == "getattr":
            return getattr(objects[target], request[2])
        args = [dec(a) for a in request[3]]
        return operate(objects[target], request[2], args)

    def serve_until_answer():
        while True:
            message = receive(down)
            if "q" not in message:
                if "e" in message:
                    raise builtin_error(message["e"])
                return dec(message["r"])
            try:
                value = answer(message["q"])
                reply = {"r": enc(value)}
            except BaseException as e:  # exits and interrupts of a call are its answer
                reply = {"e": [builtin_name(e), safe_str(e)]}
            send(up, reply)

    scope = {"__name__": "solution"}
    job = receive(down)
    loaded = True
    try:
        exec(compile(job["setup"], "<setup>", "exec"), scope)
        exec(compile(job["program"], "<solution>", "exec"), scope)
    except BaseException:  # a program that exits or raises fails every test
        loaded = False
        try:
            import traceback
            traceback.print_exc()
        except BaseException:
            pass
    names = {}
    if loaded:
        for name in list(scope):
            if name.startswith("__") and name.endswith("__"):
                continue
            try:
                names[str(name)] = enc(scope[name])
            except BaseException:
                names[str(name)] = handle(scope[name])
    send(up, {"loaded": loaded, "names": names})
    try:
        serve_until_answer()
    finally:
        os._exit(0)


def builtin_name(e):
    import builtins
    for klass in type(e).__mro__:  # the program's own exception classes travel as their builtin base
        if getattr(builtins, klass.__name__, None) is klass:
            return klass.__name__
    return "Exception"


def safe_str(e):
    try:
        return str(e)[:1000]
    except BaseException:
        return "?"


def builtin_error(pair):
    import builtins
    name, text = pair if isinstance(pair, list) and len(pair) == 2 else ("Exception", "")
    klass = getattr(builtins, str(name), None)
    if not (isinstance(klass, type) and issubclass(klass, Exception)):
        klass = RemoteError  # SystemExit, KeyboardInterrupt, GeneratorExit of the program fail its test only
    try:
        return klass(str(text))
    except BaseException:  # e.g. UnicodeDecodeError wants five arguments
        return RemoteError(str(name) + ": " + str(text))


class RemoteError(Exception):
    pass


# The plain values both sides share; anything else in `x` is `other(x)`'s to decode.
def decode_plain(x, other, depth=0):
    if x is None or x is True or x is False or type(x) is str:
        return x
    if depth > kMaxDepth or type(x) is not list or not x or type(x[0]) is not str:
        raise ValueError("not a value")
    tag, d = x[0], depth + 1

    def items(n=1):
        return [decode_plain(y, other, d) for y in x[n]]

    if tag == "i" and type(x[1]) is str:
        return int(x[1], 16)
    if tag == "f" and type(x[1]) is str:
        return float(x[1])
    if tag == "c":
        return complex(float(x[1]), float(x[2]))
    if tag == "b":
        return bytes.fromhex(x[1])
    if tag == "B":
        return bytearray.fromhex(x[1])
    if tag == "t":
        return tuple(items())
    if tag == "l":
        return items()
    if tag == "s":
        return set(items())
    if tag == "F":
        return frozenset(items())
    if tag == "d":
        return {decode_plain(k, other, d): decode_plain(v, other, d) for k, v in x[1]}
    if tag == "q":
        import fractions
        return fractions.Fraction(decode_plain(x[1], other, d), decode_plain(x[2], other, d))
    if tag == "D":
        import decimal
        return decimal.Decimal(str(x[1]))
    return other(x)


# The operations a handle forwards: names of the operator module, plus the iteration protocol.
def operate(target, name, args):
    import operator
    if name == "iter":
        return iter(target)
    if name == "next":
        return next(target)
    if name in ("len", "str", "repr", "bool", "hash", "int", "float", "index"):
        return {"len": len, "str": str, "repr": repr, "bool": bool, "hash": hash, "int": int, "float": float,
                "index": operator.index}[name](target)
    if name.startswith("r_"):  # reflected: other <op> target
        return getattr(operator, name[2:])(args[0], target)
    return getattr(operator, name)(target, *args)


# ---- the judge's side ----

def judge():
    import ctypes
    if ctypes.CDLL(None).prctl(4, 0, 0, 0, 0) != 0:  # PR_SET_DUMPABLE 0
        raise SystemExit("the judge cannot make itself undumpable")
    down_r, down_w = os.pipe()
    up_r, up_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(down_w)
        os.close(up_r)
        candidate(down_r, up_w)
    os.close(down_r)
    os.close(up_w)
    report = os.dup(1)
    os.dup2(2, 1)  # what the tests print, or an import prints, never reaches the report
    job = json.loads(sys.stdin.buffer.read())
    os.close(0)
    os.open(os.devnull, os.O_RDONLY)
    nonce, tests = job["nonce"], job["tests"]
    link = Link(down_w, up_r)
    passed = []
    try:
        send(down_w, {"setup": job["setup"], "program": job["program"]})
        hello = receive(up_r)
        loaded = hello.get("loaded") is True
    except BaseException:
        loaded = link.alive = False
    scope = {"__name__": "tests"}
    if loaded:
        try:
            exec(compile(job["setup"], "<setup>", "exec"), scope)
            adopt(scope, hello["names"], link, job.get("entry_point"))
        except BaseException:
            loaded = False
    for test in tests:
        ok = False
        if loaded and link.alive:
            try:
                exec(compile(test, "<test>", "exec"), scope)
                ok = True
            except BaseException:
                pass
        passed.append("1" if ok else "0")
    write_all(report, (nonce + " " + "".join(passed) + " " + fate(pid, link.alive) + "\n").encode())
    os._exit(0)


# How the candidate ended: "alive" (killed here, after the tests), "exit N" or "signal N" (on its own:
# the CPU limit's SIGXCPU, a crash).
def fate(pid, alive):
    import time
    deadline = time.monotonic() + (0.0 if alive else 0.5)  # a closed pipe: its exit may still be under way
    while True:
        ended, status = os.waitpid(pid, os.WNOHANG)
        if ended:
            return "signal %d" % os.WTERMSIG(status) if os.WIFSIGNALED(status) else "exit %d" % os.WEXITSTATUS(status)
        if time.monotonic() >= deadline:
            os.kill(pid, 9)
            return "alive"
        time.sleep(0.005)


# The program's names, as the tests see them. A name the setup or the builtins already bind stays
# theirs (a program that redefines `sorted` or `math` cannot change how the tests compute), except the
# record's entry point; a stdlib module's name is the real module, whatever the program bound to it.
def adopt(scope, names, link, entry):
    import builtins
    import importlib
    trusted = set(scope) | set(dir(builtins))
    for name, value in names.items():
        name = str(name)
        try:
            if name in sys.stdlib_module_names and name != entry:
                scope[name] = importlib.import_module(name)
            elif name not in trusted or name == entry:
                scope[name] = link.dec(value)
        except Exception:
            pass  # a name the judge cannot take is a name the tests do not see


class Link:
    def __init__(self, down, up):
        self.down, self.up, self.alive, self.judge_objects = down, up, True, []

    def ask(self, request):
        if not self.alive:
            raise RemoteError("the program under test ended")
        try:
            send(self.down, {"q": request})
            while True:
                message = receive(self.up)
                if "q" not in message:
                    break
                try:  # the program calls one of the judge's objects (a lambda the tests passed it)
                    request = message["q"]
                    if request[0] != "call":
                        raise TypeError("the judge's objects can only be called")
                    value = self.judge_objects[request[1]](*[self.dec(a) for a in request[2]],
                                                           **{str(k): self.dec(a) for k, a in request[3].items()})
                    reply = {"r": self.enc(value)}
                except Exception as e:
                    reply = {"e": [builtin_name(e), safe_str(e)]}
                send(self.down, reply)
        except (EOFError, OSError, ValueError, TypeError, KeyError, IndexError) as e:
            self.alive = False
            raise RemoteError("the program under test broke the protocol: %s" % safe_str(e))
        if "e" in message:
            raise builtin_error(message["e"])
        if "r" not in message:
            self.alive = False
            raise RemoteError("the program under test broke the protocol")
        return self.dec(message["r"])

    def dec(self, x):
        def other(y):
            if y[0] == "H" and type(y[1]) is int:
                return Remote(self, y[1])
            if y[0] == "M" and type(y[1]) is str:
                import importlib
                return importlib.import_module(y[1])
            raise ValueError("not a value")
        return decode_plain(x, other)

    def enc(self, v):  # the judge's values, as the candidate decodes them
        if v is None or v is True or v is False or type(v) is str:
            return v
        if type(v) is int:
            return ["i", format(v, "x")]
        if type(v) is float:
            return ["f", repr(v)]
        if type(v) is complex:
            return ["c", repr(v.real), repr(v.imag)]
        if type(v) is bytes:
            return ["b", v.hex()]
        if type(v) is bytearray:
            return ["B", v.hex()]
        if type(v) in (tuple, list, set, frozenset):
            return [{tuple: "t", list: "l", set: "s", frozenset: "F"}[type(v)], [self.enc(x) for x in v]]
        if type(v) is dict:
            return ["d", [[self.enc(k), self.enc(x)] for k, x in v.items()]]
        if isinstance(v, Remote):
            return ["H", v._id]
        self.judge_objects.append(v)  # anything else stays here: the candidate may only call it
        return ["J", len(self.judge_objects) - 1]


def forward(name):
    def method(self, *args):
        return self._link.ask(["op", self._id, name, [self._link.enc(a) for a in args]])
    return method


def compare(name):
    # Handles order and equal only each other (the program's own semantics, as in Python); against
    # the judge's values they are NotImplemented: never equal, never ordered.
    def method(self, other):
        if not isinstance(other, Remote):
            return NotImplemented
        return self._link.ask(["op", self._id, name, [self._link.enc(other)]])
    return method


class Remote:
    """An object of the program under test, seen from the judge."""
    __slots__ = ("_link", "_id")

    def __init__(self, link, ident):
        object.__setattr__(self, "_link", link)
        object.__setattr__(self, "_id", ident)

    def __call__(self, *args, **kwargs):
        link = self._link
        return link.ask(["call", self._id, [link.enc(a) for a in args], {k: link.enc(a) for k, a in kwargs.items()}])

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return self._link.ask(["getattr", self._id, name])

    def __iter__(self):
        return self._link.ask(["op", self._id, "iter", []])

    def __next__(self):
        return self._link.ask(["op", self._id, "next", []])

    def __len__(self):
        n = self._link.ask(["op", self._id, "len", []])
        if type(n) is not int:
            raise TypeError("len() of the program's object is not an int")
        return n

    def __bool__(self):
        b = self._link.ask(["op", self._id, "bool", []])
        if type(b) is not bool:
            raise TypeError("bool() of the program's object is not a bool")
        return b

    def __hash__(self):
        h = self._link.ask(["op", self._id, "hash", []])
        if type(h) is not int:
            raise TypeError("hash() of the program's object is not an int")
        return h

    def __str__(self):
        return str(self._link.ask(["op", self._id, "str", []]))

    def __repr__(self):
        return str(self._link.ask(["op", self._id, "repr", []]))

    __eq__, __ne__, __lt__, __le__, __gt__, __ge__ = (compare(n) for n in ("eq", "ne", "lt", "le", "gt", "ge"))
    __getitem__, __setitem__, __delitem__ = forward("getitem"), forward("setitem"), forward("delitem")
    __int__, __float__, __index__ = forward("int"), forward("float"), forward("index")
    __neg__, __pos__, __abs__, __invert__ = forward("neg"), forward("pos"), forward("abs"), forward("invert")


for _name in ("add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "lshift", "rshift", "and_", "or_", "xor",
              "matmul"):
    _dunder = _name.rstrip("_")
    setattr(Remote, "__%s__" % _dunder, forward(_name))
    setattr(Remote, "__r%s__" % _dunder, forward("r_" + _name))
del _name, _dunder

judge()
