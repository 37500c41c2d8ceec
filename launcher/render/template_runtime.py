"""The few pieces of Jinja's runtime that sf's precompiled template calls, so that rendering
sf's own batch script imports no Jinja (its import alone was ~40 ms of CPU on the dev host,
3% of a cold `sf submit --dry-run`, enough to cross the 1.3x budget of benchmarks/login_cost.py).

launcher/render/_train_sbatch.py is Jinja's own code for templates/train.sbatch.j2
(launcher.render.sbatch_template.compile_base writes it, and refuses to when Jinja's code
would call anything not here). Its names mean what Jinja's do for what that code uses: a
context that resolves names and holds the blocks, `environment.getattr` (attribute, then
item), `finalize`, the filters sf gives, a loop's `loop.first` and friends, undefined names
as errors (StrictUndefined). A site's own template is rendered by Jinja itself
(launcher.render.site_template). Pure; standard library only.
"""

from __future__ import annotations

# What Jinja's generated code imports from jinja2.runtime (the names must exist; the ones
# sf's template does not use raise when called).
__all__ = ["LoopContext", "Macro", "Markup", "Namespace", "TemplateNotFound", "TemplateReference",
           "TemplateRuntimeError", "Undefined", "escape", "identity", "internalcode", "markup_join",
           "missing", "str_join"]
# What the generated code may ask of its context and environment (compile_base checks).
CONTEXT_USES = ("blocks", "derived", "resolve_or_missing")
ENVIRONMENT_USES = ("concat", "filters", "finalize", "getattr", "undefined")


class _Missing:
    def __repr__(self) -> str:
        return "missing"


missing = _Missing()


class TemplateRuntimeError(Exception):
    pass


class UndefinedError(TemplateRuntimeError):
    pass


class TemplateNotFound(TemplateRuntimeError):
    pass


def internalcode(func):
    return func


def identity(value):
    return value


def str_join(seq) -> str:
    return "".join(map(str, seq))


markup_join = str_join


def _unsupported(name: str):
    def refuse(*args, **kwargs):
        raise TemplateRuntimeError(f"{name} is not in sf's template runtime: compile the template with Jinja")

    return refuse


Macro = Namespace = TemplateReference = Markup = escape = _unsupported("this construct")


class Undefined:
    """A name or attribute the context does not have: an error as soon as it is used."""

    def __init__(self, hint=None, obj=missing, name=None, exc=UndefinedError):
        self._message = hint or (f"{name!r} is undefined" if obj is missing else f"{type(obj).__name__} has no "
                                 f"attribute {name!r}")

    def _fail(self, *args, **kwargs):
        raise UndefinedError(self._message)

    __str__ = __iter__ = __bool__ = __len__ = __call__ = __getattr__ = __getitem__ = __eq__ = _fail
    __hash__ = None


class LoopContext:
    """`loop` of a for loop: index, index0, first, last, length, revindex, revindex0."""

    def __init__(self, iterable, undefined, recurse=None, depth0=0):
        self._items = list(iterable)
        self.length = len(self._items)
        self.index0 = -1

    def __iter__(self):
        for index0, item in enumerate(self._items):
            self.index0 = index0
            yield item, self

    index = property(lambda self: self.index0 + 1)
    first = property(lambda self: self.index0 == 0)
    last = property(lambda self: self.index0 == self.length - 1)
    revindex = property(lambda self: self.length - self.index0)
    revindex0 = property(lambda self: self.length - self.index0 - 1)


class Environment:
    def __init__(self, filters: dict, finalize):
        self.filters = filters
        self.finalize = finalize

    @staticmethod
    def concat(parts) -> str:
        return "".join(parts)

    @staticmethod
    def undefined(hint=None, obj=missing, name=None, exc=UndefinedError):
        return Undefined(hint, obj, name, exc)

    def getattr(self, obj, attribute):
        """Jinja's `obj.attribute`: the attribute, else the item."""
        try:
            return getattr(obj, attribute)
        except AttributeError:
            pass
        try:
            return obj[attribute]
        except (TypeError, LookupError):
            return self.undefined(obj=obj, name=attribute)


class Context:
    def __init__(self, variables: dict, blocks: dict):
        self.vars = variables
        self.blocks = blocks

    def resolve_or_missing(self, key):
        return self.vars.get(key, missing)

    def derived(self, locals=None) -> Context:
        return Context({**self.vars, **(locals or {})}, self.blocks)


def render(module, variables: dict, filters: dict, finalize) -> str:
    """The text of a precompiled template `module` (Jinja's code, defer_init) for `variables`."""
    module.environment = Environment(filters, finalize)
    context = Context(dict(variables), {name: [block] for name, block in module.blocks.items()})
    return "".join(module.root(context))
