"""Validation rules of the public API, each written once for both sides.

A :class:`Rule` holds a CEL expression (``x-kubernetes-validations``: the API server rejects
a violating object before the operator sees it) and the same predicate in Python (the
operator and ``scidmz`` commands re-check objects read from files). The CRD and the pydantic
validators are both generated from the tables here, so the two cannot drift apart: a rule
the operator enforces is a rule the API server enforces first. Each rule carries a
``violation``, an input breaking that rule alone, which the tests apply to both sides.

Two scopes, as in CEL:
- a *model* rule (``RuledModel.RULES``) sees the object (``self`` is the object; ``check``
  gets the parsed model, defaults filled, as the API server sees it after defaulting);
  its ``violation`` maps dotted paths below the object to values;
- a *field* rule (:class:`Checked`) sees one string (``self`` is the value); its
  ``violation`` is a bad value.
Rules with ``cel`` over rate strings assume the field already matched its pattern (the
schema is checked first); ``check`` parses with :mod:`scidmz.api.units`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, Self, get_args, get_origin

from pydantic import BaseModel, GetCoreSchemaHandler, GetJsonSchemaHandler, model_validator
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import core_schema

VALIDATIONS = "x-kubernetes-validations"


@dataclass(frozen=True)
class Rule:
    """One rule in both languages; ``message`` is what either side reports."""

    cel: str
    check: Callable[[Any], bool]
    message: str
    violation: Any
    field_path: str | None = None
    """The offending field relative to the rule's scope, in CEL's syntax (``.targetRate``)."""
    reason: str | None = None
    """FieldValueInvalid (default on the server), FieldValueRequired, ..."""

    def validation(self) -> dict[str, str]:
        """The ``x-kubernetes-validations`` entry."""
        entry = {"rule": self.cel, "message": self.message}
        if self.field_path is not None:
            entry["fieldPath"] = self.field_path
        if self.reason is not None:
            entry["reason"] = self.reason
        return entry


class RuleViolation(ValueError):
    """A value that breaks a rule; the message is the rule's."""


def _enforce(rules: tuple[Rule, ...], value: Any) -> None:
    """Raise the first broken rule's message (what the API server would answer)."""
    for rule in rules:
        if not rule.check(value):
            raise RuleViolation(rule.message)


class Checked:
    """Field rules as ``Annotated`` metadata: ``Annotated[str, Field(pattern=...),
    Checked(rule, ...)]`` adds the rules' CEL to the field's schema and their checks to its
    validation (after the pattern and length constraints, as on the server)."""

    def __init__(self, *rules: Rule) -> None:
        self.rules = rules

    def _validate(self, value: Any) -> Any:
        _enforce(self.rules, value)
        return value

    def __get_pydantic_core_schema__(
        self, source: Any, handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        return core_schema.no_info_after_validator_function(self._validate, handler(source))

    def __get_pydantic_json_schema__(
        self, schema: core_schema.CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        json_schema = handler(schema)
        json_schema.setdefault(VALIDATIONS, []).extend(r.validation() for r in self.rules)
        return json_schema


def _annotations(annotation: Any) -> Iterator[Any]:
    """``annotation`` and everything inside it (Annotated metadata, Union arms, list items)."""
    yield annotation
    if get_origin(annotation) is Annotated:
        yield from annotation.__metadata__
        yield from _annotations(get_args(annotation)[0])
        return
    for arg in get_args(annotation):
        yield from _annotations(arg)


@dataclass(frozen=True)
class PlacedRule:
    """A rule and where it applies: ``path`` is the dotted camelCase path below the model
    walked (``""`` for the model itself), ``on_field`` tells a field rule from a model rule."""

    path: str
    rule: Rule
    on_field: bool


def _is_list(annotation: Any) -> bool:
    """A list field (possibly Annotated or Optional): its models sit in its items."""
    if get_origin(annotation) is Annotated:
        return _is_list(get_args(annotation)[0])
    if get_origin(annotation) is list:
        return True
    return any(_is_list(arg) for arg in get_args(annotation) if arg is not type(None))


def walk_rules(model: type[BaseModel], path: str = "") -> Iterator[PlacedRule]:
    """Every rule of ``model`` and the models below it, with its place (a list's items are
    ``<field>[]``, as CEL's ``items``)."""
    for rule in getattr(model, "RULES", ()):
        yield PlacedRule(path, rule, on_field=False)
    for name, info in model.model_fields.items():
        child = f"{path}.{info.alias or name}".lstrip(".")
        found = list({id(i): i for i in (*info.metadata, *_annotations(info.annotation))}.values())
        for item in found:
            if isinstance(item, Checked):
                for rule in item.rules:
                    yield PlacedRule(child, rule, on_field=True)
        below = f"{child}[]" if _is_list(info.annotation) else child
        for item in found:
            if isinstance(item, type) and issubclass(item, BaseModel):
                yield from walk_rules(item, below)


def _add_model_rules(schema: dict[str, Any], cls: type[Any]) -> None:
    rules: tuple[Rule, ...] = getattr(cls, "RULES", ())
    if rules:
        schema[VALIDATIONS] = [r.validation() for r in rules]


class RuledModel(BaseModel):
    """A model whose cross-field rules are ``RULES``: the CRD's CEL at this object and the
    model's validator come from the same tuple."""

    RULES: ClassVar[tuple[Rule, ...]] = ()

    model_config = {"json_schema_extra": _add_model_rules}

    @model_validator(mode="after")
    def _check_rules(self) -> Self:
        _enforce(type(self).RULES, self)
        return self
