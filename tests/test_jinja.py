"""JinjaTemplate renders every official template exactly as transformers does, in a sandbox."""
from __future__ import annotations

import datetime as dt

import pytest
from hypothesis import HealthCheck, given, settings

from lmchat import JinjaTemplate, Session, register_template
from lmchat.errors import InvalidMessages, TemplateConfigError, TemplateRuleError
from lmchat.interop.jinja import compile_template
from lmchat.registry import CHAT_TEMPLATES

from . import oracle
from .conversations import PLAIN, REASONING, TOOL_CONVERSATIONS, TOOLS, dialogues, plain_dialogues
from .hypothesis_profiles import examples
from .test_session_invariant import play

NEEDS_OFFICIAL_TEXTS = oracle.needs_corpus_for("renders the official template texts themselves")
STEMS = (sorted(p.stem for p in (oracle.CORPUS / "templates").glob("*.jinja")) if oracle.AVAILABLE
         else [pytest.param("(every corpus file)", marks=NEEDS_OFFICIAL_TEXTS)])
NOW = dt.datetime(oracle.DATE.year, oracle.DATE.month, oracle.DATE.day)
SESSION_STEMS = {
    "jinja-test-qwen2.5": "Qwen__Qwen2.5-7B-Instruct",
    "jinja-test-llama3.1": "meta-llama__Llama-3.1-8B-Instruct",
    "jinja-test-gemma2": "google__gemma-2-2b-it",
}


def corpus_template(stem: str) -> JinjaTemplate:
    return JinjaTemplate.from_string(oracle.template_text(stem), name=stem, **oracle.special_tokens(stem))


def assert_same(stem, template, messages, **options):
    try:
        expected = oracle.module().render(
            oracle.template_text(stem), messages, special_tokens=oracle.special_tokens(stem), now=NOW, **options
        )
    except Exception:  # the official template rejects the conversation: so must we
        with pytest.raises(ValueError):
            template.messages2prompt(messages, date=oracle.DATE, **options)
        return
    assert template.messages2prompt(messages, date=oracle.DATE, **options) == expected


@oracle.needs_corpus_for("counts the corpus' template files")
def test_the_corpus_is_complete():
    assert len(STEMS) == 87


@pytest.mark.parametrize("stem", STEMS)
def test_corpus_template_renders_like_transformers(stem):
    template = corpus_template(stem)
    for generation_prompt in (True, False):
        for label, messages in {**PLAIN, **REASONING}.items():
            try:
                assert_same(stem, template, messages, add_generation_prompt=generation_prompt)
            except AssertionError as exc:
                raise AssertionError(f"{label!r} generation_prompt={generation_prompt}: {exc}") from exc
        for label, messages in TOOL_CONVERSATIONS.items():
            for tools in (TOOLS, None, []):
                try:
                    assert_same(stem, template, messages, add_generation_prompt=generation_prompt, tools=tools)
                except AssertionError as exc:
                    raise AssertionError(f"{label!r} tools={tools is not None}: {exc}") from exc


# ---------------------------------------------------------------------- sessions
@pytest.fixture(scope="module")
def session_templates():
    """Three official templates registered by name (so sessions can be saved and restored)."""
    if not oracle.AVAILABLE:
        pytest.skip(f"sessions on official template texts: {oracle.SKIP_REASON}")
    for name, stem in SESSION_STEMS.items():
        register_template(name, corpus_template(stem))
    yield list(SESSION_STEMS)
    for name in SESSION_STEMS:
        CHAT_TEMPLATES.module_dict.pop(name, None)


@pytest.mark.parametrize("name", list(SESSION_STEMS))
@settings(max_examples=examples(40), deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(dialogue=dialogues())
def test_session_delta_invariant(session_templates, name, dialogue):
    play(name, *dialogue, roundtrip=True)


@pytest.mark.parametrize("name", list(SESSION_STEMS))
@settings(max_examples=examples(25), deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(dialogue=plain_dialogues())
def test_plain_sessions_never_reset(session_templates, name, dialogue):
    play(name, *dialogue, check_stable=True)


@NEEDS_OFFICIAL_TEXTS
def test_inferred_turn_markers():
    qwen = corpus_template("Qwen__Qwen2.5-7B-Instruct")
    assert (qwen.lead, qwen.eoa) == ("", "<|im_end|>") and "<|im_end|>" in qwen.stop_words
    assert corpus_template("meta-llama__Llama-3.1-8B-Instruct").eoa == "<|eot_id|>"
    assert corpus_template("google__gemma-2-2b-it").eoa == "<end_of_turn>"
    deepseek = corpus_template("deepseek-ai__deepseek-llm-7b-chat")
    assert deepseek.lead == " "  # history renders 'Assistant: ' after the 'Assistant:' prompt
    qwen3 = corpus_template("Qwen__Qwen3-8B")
    assert qwen3.evolve(chat_template=qwen.chat_template).lead == ""  # re-inferred for the new source


def test_session_on_an_unregistered_template_resets_nothing():
    t = JinjaTemplate.from_string(
        "{% for m in messages %}<{{ m.role }}>{{ m.content }}</s>{% endfor %}"
        "{% if add_generation_prompt %}<assistant>{% endif %}",
        eos_token="</s>",
    )
    assert t.eoa == "</s>" and t.stop_words == ("</s>",)
    s = Session(t)
    assert s.prompt("hi").text == "<user>hi</s><assistant>"
    s.commit("yo")
    delta = s.prompt("again")
    assert not delta.reset and delta.text == "<user>again</s><assistant>"
    with pytest.raises(TemplateConfigError, match="register_template"):
        s.to_dict()


def test_registered_template_takes_overrides():
    name = "jinja-test-overrides"
    try:
        register_template(name, JinjaTemplate.from_string("{{ messages[0].content }}", temperature=0.3, name="tiny"))
        from lmchat import get_template

        t = get_template(name, top_p=0.5)
        assert (t.temperature, t.top_p, t.name) == (0.3, 0.5, name)
        assert t.messages2prompt([{"role": "user", "content": "x"}]) == "x"
    finally:
        CHAT_TEMPLATES.module_dict.pop(name, None)


# ---------------------------------------------------------------------- environment
def render(source, messages=({"role": "user", "content": "hi"},), **options):
    return JinjaTemplate.from_string(source).messages2prompt(list(messages), **options)


@pytest.mark.parametrize(
    "source",
    [
        "{{ ''.__class__.__mro__ }}",
        "{{ ''.__class__.__mro__[1].__subclasses__() }}",
        "{{ cycler.__init__.__globals__.os.popen('id').read() }}",
        "{{ dict.__call__.__globals__ }}",
        "{% set ns = namespace(_private=1) %}",
        "{% set x = messages.append({'role': 'user'}) %}",
        "{% set x = messages[0].update({'content': 'changed'}) %}",
    ],
)
def test_sandbox_refuses_unsafe_templates(source):
    with pytest.raises(InvalidMessages, match="unsafe|underscore|not safe|undefined|Security"):
        render(source)


def test_sandbox_hides_internals_it_does_not_refuse():
    # printing an unsafe attribute prints nothing (an undefined), as in transformers
    assert render("{{ messages.__class__ }}|{{ messages[0].__dict__ }}") == "|"


def test_template_errors_are_value_errors():
    with pytest.raises(TemplateRuleError, match="no system") as exc:
        render("{{ raise_exception('no system') }}")
    assert exc.value.rule == "template-raise"
    with pytest.raises(InvalidMessages, match="UndefinedError"):
        render("{{ messages[0].nope.deeper }}")
    with pytest.raises(InvalidMessages, match="TypeError"):
        render("{{ messages[0].content + 1 }}")
    with pytest.raises(TemplateConfigError, match="line 1"):
        JinjaTemplate.from_string("{% if %}")


def test_transformers_extensions():
    assert render("{{ strftime_now('%d %b %Y') }}", date=dt.date(2024, 7, 26)) == "26 Jul 2024"
    assert render("{{ {'b': 'é', 'a': 1} | tojson(indent=1, sort_keys=True) }}") == '{\n "a": 1,\n "b": "é"\n}'
    assert render("{% generation %}gen{% endgeneration %}") == "gen"
    assert render("{% for i in range(5) %}{% if i == 2 %}{% break %}{% endif %}{{ i }}{% endfor %}") == "01"
    assert render("{% set ns = namespace(n=1) %}{% set ns.n = ns.n + 1 %}{{ ns.n }}{{ dict(a=1)['a'] }}") == "21"
    assert render("  {% if true %}\nx{% endif %}\n") == "x"  # trim/lstrip blocks, trailing newline dropped
    assert render("{{ flavour }}", flavour="mint") == "mint"  # extra kwargs become variables


def test_compiled_once_per_source():
    source = "{{ messages | length }} compiled once"
    assert compile_template(source) is compile_template(source)


def test_named_templates_follow_transformers_selection():
    t = JinjaTemplate(named_templates=[{"name": "default", "template": "D"}, {"name": "tool_use", "template": "T"}])
    msgs = [{"role": "user", "content": "x"}]
    assert t.messages2prompt(msgs) == "D"
    assert t.messages2prompt(msgs, tools=[]) == "T"  # transformers tests `tools is not None`
    only_tools = JinjaTemplate(named_templates={"tool_use": "T"})
    with pytest.raises(TemplateConfigError, match="no default chat template"):
        only_tools.messages2prompt(msgs)
