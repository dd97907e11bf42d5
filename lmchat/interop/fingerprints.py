"""Fingerprints of official chat templates: how the template a model folder ships is recognised.

The official Jinja texts cannot be stored in the repository, so this module keeps
only the SHA-256 of each normalised text and the corpus files (``org__model``)
that ship it. A built-in template claims a text through its own ``official``
attribute (a corpus file stem), so the table says nothing about lmchat's
templates; ``tests/test_matching.py`` recomputes it from ``../shared/conformance``.
"""
from __future__ import annotations

import hashlib

from ..registry import template_class, template_names

#: sha256 of the normalised official text -> the corpus files that ship exactly that text
OFFICIAL_TEXTS: dict[str, tuple[str, ...]] = {
    "58c1a1f04baa7adaeaba1f90267c3d57d9396f0c1f0129bdde9e76d3c6784af7": ("01-ai__Yi-34B-Chat", "01-ai__Yi-6B-Chat"),
    "91aa728ae59c8e30443382f44f48d594b5f7afe91a449c0e5ed0e920a71d60a2": ("01-ai__Yi-1.5-9B-Chat",),
    "75f5fed5cd66cc75ae786ae18dfc2963a864001767000af694111675e947e0d5": ("01-ai__Yi-Coder-9B-Chat",),
    "75678d463085865163b4c6dbc28f7178738d992b53124ad3612304f48a983b02": ("codellama__CodeLlama-70b-Instruct-hf",),
    "9db2cf47ce03bfd0aab6ec59942503714fa0372f09f7e1d54cbcd71a1110b863": ("CohereForAI__c4ai-command-r-plus",),
    "658919e2d822e7b300e76b1304ffe60f409b0e3f300f4fec2a88aa474774eafc": ("CohereForAI__c4ai-command-r-plus-tool_use",),
    "3a06dd2315c5fad58fb45ffe6bf91e012519104eb1817cb97b9924a6d9767702": ("CohereForAI__c4ai-command-r-v01-tool_use",),
    "0c3f266d86f93a1f50f1573648ba005cb9691ff176c2cfd7ca1a0a33fd7023ec": (
        "CohereForAI__c4ai-command-r7b-12-2024-tool_use",
    ),
    "54d400beedcd17f464e10063e0577f6f798fa896266a912d8a366f8a2fcc0bca": ("deepseek-ai__DeepSeek-V2.5",),
    "993c0af704bad76aeba4263a5318f7873a06420a8eb7d40b72a49c39599c0a66": (
        "deepseek-ai__deepseek-coder-33b-instruct",
        "deepseek-ai__deepseek-coder-6.7b-instruct",
    ),
    "3a3036eeb96ca0e48565fc1f19b4d7d3fa17ada32bb1b3d5ed539ae74cf22923": ("deepseek-ai__DeepSeek-R1",),
    "56a1447ad31926fdc21fb07e56e5642bd9c850c4f52d8c8af7bbe5f079a84f5f": (
        "deepseek-ai__DeepSeek-R1-Distill-Llama-8B",
        "deepseek-ai__DeepSeek-R1-Distill-Qwen-32B",
    ),
    "8aeba567270fa9a8d5372caf4b04affea947c4421d96adc01e3ff94021b0ae8e": (
        "deepseek-ai__DeepSeek-V2-Chat",
        "deepseek-ai__deepseek-llm-7b-chat",
    ),
    "3b8267e54b67df6500f231ffa969955cc9d26b3444a291ced4eb96ca7d3ca1ea": ("deepseek-ai__DeepSeek-V3",),
    "45690185067ea25c073bff2d3e425a45ee2564d2bbf6cdf7d885e139d460b8e0": ("deepseek-ai__DeepSeek-V3.1",),
    "ecd6ae513fe103f0eb62e8ab5bfa8d0fe45c1074fa398b089c93a7e70c15cfd6": (
        "google__gemma-2-2b-it",
        "google__gemma-2b-it",
        "google__gemma-7b-it",
    ),
    "008dbfcb139c3513a6f3a3fe810ed9a6b75b5254716f00a2369c1375c791b049": ("fireworks-ai__llama-3-firefunction-v2",),
    "8d9e3a3c114fb2053ec500184677af4f7e5f8ec2582443cd535834e68b3ade29": ("google__gemma-3-1b-it",),
    "6a1015c47ccfcfa67c3b772385bccee357a4d37c3cda37bd202e9047f391ab82": ("google__gemma-4-31B-it",),
    "603a42db292c25278e9b23d94c7abbe77453f13e26a053c43c5c2f900b4136f7": ("google__gemma-4-E4B-it",),
    "3ce2fe9753f9a77a601f55dfcab7cd46fbc91324aae0f78ca38d194a4eaef8d5": ("HuggingFaceH4__zephyr-7b-gemma-v0.1",),
    "66291cf0045c2425a3a667cf3cbb7af2b11f09e025c02f97245323ab79119362": (
        "HuggingFaceH4__zephyr-7b-beta",
        "TinyLlama__TinyLlama-1.1B-Chat-v1.0",
    ),
    "872be49dbb638044ad01b60388f48d469ff2980e5f0dccdc22ec907db54d0788": ("HuggingFaceTB__SmolLM2-135M-Instruct",),
    "3e0e275a527f249670056e0078e474eadbdd007c134b4fdfae5a7b3089702814": ("HuggingFaceTB__SmolLM3-3B",),
    "09d68eeb5c0eaa551adea6cc088a05c7298966f395f203126e76b74f5a77a8ff": ("ibm-granite__granite-3.0-8b-instruct",),
    "08962c2f15d56767854b46dfc4070b37f4c443551833bba65b417191735f3187": ("ibm-granite__granite-3.1-8b-instruct",),
    "d0657ba05651bd2134160e7a9fbe40f1aa51ecb6bc2724618e34b04466291f87": ("ibm-granite__granite-3.3-2b-instruct",),
    "9524df67b77a7b25a2dfee898f75b316a157eb9d855b51e32aeac79d7c8a83ce": ("ibm-granite__granite-4.0-h-small",),
    "49aa7cb516942cc5a17d45ed2939828e3b5e4188dc487a3c4b64a570e5b5111f": (
        "internlm__internlm2-chat-7b",
        "internlm__internlm2_5-7b-chat",
        "internlm__internlm3-8b-instruct",
    ),
    "e8d5b5a546d3f19df16a5320c614fab05bdc4edd50e850f1afd947b503ea41cf": ("meta-llama__Llama-2-7b-chat-hf",),
    "93c0e9aa3629bbd77e68dbc0f5621f6e6b23aa8d74b932595cdb8d64684526d7": (
        "meta-llama__Llama-3.1-8B-Instruct",
        "meta-llama__Llama-3.3-70B-Instruct",
    ),
    "d82792f95932f1c9cef5c4bd992f171225e3bf8c7b609b4557c9e1ec96be819f": ("meta-llama__Llama-3.2-3B-Instruct",),
    "ba03a121d097859c7b5b9cd03af99aafe95275210d2876f642ad9929a150f122": ("meta-llama__Meta-Llama-3-8B-Instruct",),
    "b2b7d1a2ff8344254daa5bc2f59a9182994806e94fdc191fe92b4a0693d8cb68": ("meetkai__functionary-medium-v3.1",),
    "5c7c96c27cfecf3418411d1ebd0d11d691ab6bd2155bb38dacc62250fe47c3c8": ("meetkai__functionary-medium-v3.2",),
    "605841622bcb6572225608f09ec2afcdfb9fb50844ef52715a12689f7b9278b1": ("microsoft__Phi-3-medium-4k-instruct",),
    "dcaee66df77bfbb789ec541fe713218da30225a526f1db97138fc39ee6dc56aa": ("microsoft__Phi-3-mini-4k-instruct",),
    "b0e53f5e7bae6fdb93013abeceef343e8841cce87def2601e7269a53439b5740": ("microsoft__Phi-3-small-8k-instruct",),
    "78d976a442bcde2f0be15aafbb8e3050e1104f86732266f68403251b89982a90": ("microsoft__Phi-3.5-mini-instruct",),
    "febf589225c9728ab791f52e8897d7607a823d45368f0a4c92fa68997b40cce9": ("microsoft__Phi-4-mini-instruct",),
    "5a4c7c0b12bdbbc7110aebe80b15ac3d4dbabde85be466925dc2cf52d7698ceb": ("microsoft__Phi-4-reasoning",),
    "fe4120415a3858b873955c92ce3a103a95bc97c2cb00b72e62659aaf0f891ee5": ("microsoft__phi-4",),
    "ac888ea51c72437ddbd57032b819c5d04d76c313147e1f3f2add070493fac49c": ("mistralai__Codestral-22B-v0.1",),
    "bbc58aad99454df60138be9530c9601a0adfe3d8932cda975e1f10b2410ddc51": (
        "mistralai__Mistral-7B-Instruct-v0.1",
        "mistralai__Mistral-7B-Instruct-v0.2",
        "mistralai__Mixtral-8x7B-Instruct-v0.1",
    ),
    "cafb64e0e9e5fd2503054b3479593fae39cbdfd52338ce8af9bb4664a8eb05bd": (
        "mistralai__Mistral-7B-Instruct-v0.3",
        "mistralai__Mixtral-8x22B-Instruct-v0.1",
    ),
    "3c4ad5fa60dd8c7ccdf82fa4225864c903e107728fcaf859fa6052cb80c92ee9": ("mistralai__Mistral-Large-Instruct-2411",),
    "e7deee034838db2bfc7487788a3013d8a307ab69f72f3c54a85f06fd76007d4e": ("mistralai__Mistral-Nemo-Instruct-2407",),
    "3934d199bfe5b6fab5cba1b5f8ee475e8d5738ac315f21cb09545b4e665cc005": ("mistralai__Mistral-Small-24B-Instruct-2501",),
    "5f42291cf1b71a8eeae031eafd5bdc669586dbbbebba344a5d641322af152aa7": (
        "mistralai__Mistral-Small-3.1-24B-Instruct-2503",
    ),
    "d990bccdaaa20611e261434bf60bce767b03d8ee1f1d9b5cd0742b1cc96066b9": (
        "mistralai__Mistral-Small-3.2-24B-Instruct-2506",
    ),
    "39e8c195b474c1a4148046f41fedd177b2ff8f420fa376e52fcdddb829e8f0c5": ("moonshotai__Kimi-K2-Instruct",),
    "a805e50fed68938a076b07e2e602639611b50b1ced0e50f11eb92f1ba25be4dc": ("NousResearch__Hermes-2-Pro-Llama-3-8B",),
    "ce62e308475b364e1fc76699dccbddeb9ac08344f90d59719dba86a9922834d9": (
        "NousResearch__Hermes-2-Pro-Llama-3-8B-tool_use",
        "NousResearch__Hermes-3-Llama-3.1-8B-tool_use",
    ),
    "9ff2eb30a1d3e937a88108d74b1ab940891be58aa742be4e8c0ce1c1ad90588e": ("NousResearch__Hermes-3-Llama-3.1-8B",),
    "a4c9919cbbd4acdd51ccffe22da049264b1b73e59055fa58811a99efbd7c8146": ("openai__gpt-oss-120b",),
    "901b10d47195fadb5692137ecd4b2733730be9d32fde6c6eae23e5153712525e": ("openchat__openchat-3.5-0106",),
    "2e2a1fc91d942edd0883b788adfaa3fc179fbddd1e28b1bc11d56f00db2f43ce": ("openchat__openchat-3.6-8b-20240522",),
    "793202280c0910ab26bc6eb57c8212c2417324c6d8c4efd0d10d59092ab3e3eb": (
        "Qwen__Qwen1.5-1.8B-Chat",
        "Qwen__Qwen1.5-7B-Chat",
        "Qwen__Qwen2-7B-Instruct",
    ),
    "55b2f4a26ac9ee719330a61a0c39d9e538b0e9322212f048326318cff4f8674a": (
        "Qwen__Qwen2.5-7B-Instruct",
        "Qwen__Qwen2.5-Coder-7B-Instruct",
    ),
    "64f85b198065d0fba2a81f37e10ed68161ce2c19a754c7100e67e0ca2ee9c326": ("Qwen__Qwen3-4B-Instruct-2507",),
    "3802169b2a02b81e6adb7ab4f64f91ff02db753c8c3a64a01c35192d3a61d8d7": ("Qwen__Qwen3-4B-Thinking-2507",),
    "a55ee1b1660128b7098723e0abcd92caa0788061051c62d51cbe87d9cf1974d8": ("Qwen__Qwen3-8B",),
    "32bf2564d2245b98298677d3ac2332ab50bc3279740c13c3974689464b38aa3c": ("Qwen__Qwen3-Coder-30B-A3B-Instruct",),
    "cb2d7aa140bed098f4ac8ab1a403980e6768d58ec95ef701668fc7dd017e0762": ("Qwen__QwQ-32B",),
    "0ea596a118301cd1017adceb54953b67baaa8f2cc6403f5944a33db9195d1691": ("Qwen__QwQ-32B-Preview",),
    "e4496f930bf7b7bc7e7cf8232e90fd43ab4a9d8eb9c77f6ec98f5beb5c5cbeaa": ("THUDM__chatglm3-6b",),
    "27288f957f8364c990a2ce13bf5f8bf86921c4bce467ce698c76dcc69466d821": ("THUDM__glm-4-9b-chat",),
    "914ccd80356f5822d1a50d97546e37f60c04ed831fe431aa40346574ec266901": ("tiiuae__Falcon3-7B-Instruct",),
    "b8e5e922a7a4ab5df61a904ef54639a27022fd84eb6b6434f09503afeca60eb4": ("upstage__SOLAR-10.7B-Instruct-v1.0",),
    "44f815868bf02fa458dd2f741a338046f4bf45f398eb6d067766726b9d96cce3": ("zai-org__GLM-4.5-Air",),
}


def normalize(text: str) -> str:
    """The text as Jinja sees it: LF line endings, one trailing newline dropped.

    transformers renders with ``keep_trailing_newline=False``, so copies that
    differ only there (``chat_template.jinja`` files often end with one) are
    the same template.
    """
    text = text.replace("\r\n", "\n")
    return text.removesuffix("\n")


def fingerprint(text: str) -> str:
    return hashlib.sha256(normalize(text).encode("utf-8")).hexdigest()


def templates_with_fingerprint(digest: str) -> list[str]:
    """Registered templates whose own ``official`` (or ``official_tool_use``) file ships the text with this fingerprint.

    Only a class that declares the attribute itself claims it: a subclass that
    changes the rendering without saying so must not inherit the claim.
    """
    stems = set(OFFICIAL_TEXTS.get(digest, ()))
    return [n for n in template_names() if stems & claimed_stems(n)]


def claimed_stems(name: str) -> set[str]:
    """The corpus files built-in ``name`` declares itself byte-exact with (its default and tool_use templates)."""
    own = template_class(name).__dict__
    return {stem for stem in (own.get("official"), own.get("official_tool_use")) if stem}
