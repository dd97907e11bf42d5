"""JSON schemas of different shapes, each with a question to ask for it: what tests/test_constraints.py checks
and ``python -m bench constraints`` measures (enums, bounded numbers, arrays with min and max items, nested
objects, optional fields, string lengths; additionalProperties false as OpenAI's strict mode requires)."""

SCHEMAS = {
    "enum and bounded integer": ({
        "type": "object", "additionalProperties": False, "required": ["name", "age", "colour"],
        "properties": {"name": {"type": "string"}, "age": {"type": "integer", "minimum": 0, "maximum": 120},
                       "colour": {"enum": ["red", "green", "blue"]}}},
        "Describe a person: name, age and favourite colour."),
    "bounded number": ({
        "type": "object", "required": ["city", "temperature"], "additionalProperties": False,
        "properties": {"city": {"type": "string"}, "temperature": {"type": "number", "minimum": -50, "maximum": 60}}},
        "What is the weather in Paris?"),
    "array with min and max items": ({
        "type": "object", "required": ["colours"], "additionalProperties": False,
        "properties": {"colours": {"type": "array", "items": {"type": "string"}, "minItems": 2, "maxItems": 4}}},
        "Name some colours."),
    "nested objects": ({
        "type": "object", "required": ["book"], "additionalProperties": False,
        "properties": {"book": {"type": "object", "required": ["title", "author"], "additionalProperties": False,
                                "properties": {"title": {"type": "string"},
                                               "author": {"type": "object", "required": ["name"],
                                                          "properties": {"name": {"type": "string"}}}}}}},
        "Tell me about a book you like."),
    "optional fields": ({
        "type": "object", "required": ["answer"], "additionalProperties": False,
        "properties": {"answer": {"type": "string"}, "confidence": {"type": "number"},
                       "sources": {"type": "array", "items": {"type": "string"}}}},
        "What is the capital of Italy?"),
    "boolean and string length": ({
        "type": "object", "required": ["question", "yes"], "additionalProperties": False,
        "properties": {"question": {"type": "string", "minLength": 3, "maxLength": 40}, "yes": {"type": "boolean"}}},
        "Is the sky blue?"),
}

#: two tools for forced calls (tests/test_forcing.py, ``python -m bench forced_calls``): bounded arguments, one
#: a string and an integer, the other two numbers
WEATHER = {"type": "object", "additionalProperties": False, "required": ["city", "days"],
           "properties": {"city": {"type": "string", "minLength": 1, "maxLength": 12},
                          "days": {"type": "integer", "minimum": 1, "maximum": 7}}}
ADD = {"type": "object", "additionalProperties": False, "required": ["a", "b"],
       "properties": {"a": {"type": "number"}, "b": {"type": "number"}}}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "The forecast.",
                                           "parameters": WEATHER}},
         {"type": "function", "function": {"name": "add", "description": "a + b", "parameters": ADD}}]
PARAMS = {"get_weather": WEATHER, "add": ADD}


def forced_for_a_small_model(template: str, names, tokens):
    """A forced call's constraint as the server applies it (after a reasoning block or channel), for the bundled
    SmolLM2, which never ends gpt-oss' analysis message or Gemma 4's thought channel by itself: there, a budget
    of 30 tokens forces the end (a model of the family ends them)."""
    import attrs

    from lmchat.registry import get_template
    from lmchat.tools.answer_constraint import for_answer
    from lmchat.tools.channel_lead import gemma4_lead, harmony_lead, marker_writer
    from lmchat.tools.forcing import forced_calls

    constraint = for_answer(forced_calls(TOOLS, template, names=names, tokens=tokens), get_template(template))
    if template == "gpt-oss":
        constraint = attrs.evolve(constraint, lead=harmony_lead(marker_writer(tokens), final=False, max_tokens=30))
    if template.startswith("gemma4"):
        constraint = attrs.evolve(constraint, lead=gemma4_lead(marker_writer(tokens), max_tokens=30))
    return constraint
