"""InternLM2-Chat's agent examples, copied verbatim from the seed chat-format document (seed 000).

``test_tool_prompts`` checks that the copies are verbatim when the seed is at
hand, then renders the same conversations from OpenAI-style messages. Two
things in the seed are not well defined and are replaced the documented way
(docs/tool-prompts.md): the tool list, illustrative Python with trailing commas
(lmchat writes ``json.dumps(functions, ensure_ascii=False)`` instead, through
the list's trailing newline), and the ``<|im_end|>\\n`` the seed leaves out after
the interpreter's system prompt (every turn ends with ``<|im_end|>``, as the
document itself says).
"""
from __future__ import annotations

import json

from lmchat.templates.internlm2 import INTERPRETER_PROMPT

SYSTEM = "你是书生浦语2，一个无害的人工智能助手"
WEATHER = {
    "name": "get_current_weather",
    "description": "Get the current weather in a given location",
    "parameters": {
        "type": "object",
        "properties": {
            "location": {"type": "string", "description": "The city and state, e.g. San Francisco, CA"},
            "unit": {"type": "string"},
        },
        "required": ["location"],
    },
}
SEED_TOOL_LIST = """[
    {
        "name": "get_current_weather",
        "description": "Get the current weather in a given location",
        "parameters": {
            "type": "object",
            "properties": {
                "location": {
                    "type": "string",
                    "description": "The city and state, e.g. San Francisco, CA",
                },
                "unit": {"type": "string"},
            },
            "required": ["location"],
        },
    }
]
"""
CODE = """import plotly.express as px
import pandas as pd

# Load the data into a pandas dataframe
df = pd.read_csv('data.csv')

# Create a scatter plot of rainfall vs wind direction
fig = px.scatter(df, x='WindDir9am', y='Rainfall', color='WindDir3pm',
                 labels={'WindDir9am': 'Wind Direction 9am', 'Rainfall': 'Rainfall', \
'WindDir3pm': 'Wind Direction 3pm'},
                 title='Rainfall vs Wind Direction',
                 template='plotly_dark',
                 width=600, height=500)

# Add a hover effect to show the date
fig.update_traces(hovertemplate='<b>Date: %{text}</b><br>Wind Direction 9am: %{x}<br>Rainfall: %{y}<br>\
Wind Direction 3pm: %{marker.color}')

# Show the plot
fig.show()"""
ANSWER_1 = (
    "由于代码输出没有包含在这里，我无法提供具体的图表内容。"
    "但是，如果代码执行无误，它会显示一个极坐标图，其中包含两个填充区域，"
    "一个代表上午9点的风向与降雨量的关系，另一个代表下午3点的风向与降雨量的关系。"
    "每个方向上的值是根据提供的数据集计算得到的平均降雨量。"
    "图表应该有一个清晰的标题、图例，并且能够直观地比较不同风向下的降雨量。"
    "由于使用了暗色主题，图表的整体外观应该是深色背景上的亮色线条和填充区域。"
)
ANSWER_2 = (
    "我使用的是Python的Plotly库来创建一个极坐标图，以展示风向与降雨量之间的关系。"
    "代码中首先创建了一个Plotly的Figure对象。"
    "接着，我添加了两个`Scatterpolar`追踪。"
    "第一个追踪展示的是上午9点的风向与降雨量的平均值的关系，"
    "第二个追踪展示的是下午3点的风向与降雨量的平均值的关系。"
    "在这两个追踪中，`r`参数代表降雨量的平均值，`theta`参数代表风向。"
    "`fill='toself'`表示图形以自身为边界进行填充。"
    "然后我更新了图表的布局，隐藏了径向轴，添加了图例，设置了标题和标题字体，"
    "选择了暗色主题，并设定了图表的背景色、宽度和高度。"
    "最后，使用`fig.show()`展示了图表。\n"
)

SYSTEM_TURN = f"<|im_start|>system\n{SYSTEM}<|im_end|>\n"
PLUGIN_PROMPT_TURN = f"<|im_start|>system name=<|plugin|>\n{SEED_TOOL_LIST}<|im_end|>\n"
INTERPRETER_PROMPT_TURN = f"<|im_start|>system name=<|interpreter|>\n{INTERPRETER_PROMPT}"  # sic: no <|im_end|>
PLUGIN_TURNS = (
    "<|im_start|>user\n我想了解今天上海的天气<|im_end|>\n"
    "<|im_start|>assistant\n好的，我将为你查询上海的天气。<|action_start|><|plugin|>\n"
    '{"name": "get_current_weather", "parameters": {"location": "Shanghai"}}<|action_end|><|im_end|>\n'
    '<|im_start|>environment name=<|plugin|>\n{"temperature": 22}<|im_end|>\n'
    "<|im_start|>assistant\n上海的天气是 22 摄氏度<|im_end|>"
)
INTERPRETER_TURNS = (
    "<|im_start|>user\n请帮我对该数据集进行数据处理并可视化。\n<|im_end|>\n"
    "<|im_start|>user name=file\n[{\"path\": \"data.csv\", size='10K'}]<|im_end|>\n"
    "<|im_start|>assistant\n我已经帮您处理了数据并进行了可视化。\n\n"
    f"<|action_start|><|interpreter|>\n```python\n{CODE}\n"
    "```<|action_end|>\n<|im_end|>\n"
    "<|im_start|>environment name=<|interpreter|>\n![image](xxx.png)\n<|im_end|>\n"
    f"<|im_start|>assistant\n{ANSWER_1}<|im_end|>\n"
    "<|im_start|>user\n你能解释一下代码吗<|im_end|>\n"
    f"<|im_start|>assistant\n{ANSWER_2}<|im_end|>"
)

#: the seed's three examples: tool call, code interpreter, both together
SEED_PLUGIN = SYSTEM_TURN + PLUGIN_PROMPT_TURN + PLUGIN_TURNS
SEED_INTERPRETER = SYSTEM_TURN + INTERPRETER_PROMPT_TURN + INTERPRETER_TURNS
SEED_BOTH = SYSTEM_TURN + INTERPRETER_PROMPT_TURN + PLUGIN_PROMPT_TURN + INTERPRETER_TURNS + "\n" + PLUGIN_TURNS


def as_rendered(seed: str) -> str:
    """A seed example as lmchat renders it: bos, JSON tool list, the missing ``<|im_end|>``, the final newline."""
    seed = seed.replace(SEED_TOOL_LIST, json.dumps([WEATHER], ensure_ascii=False))
    seed = seed.replace(INTERPRETER_PROMPT_TURN, INTERPRETER_PROMPT_TURN + "<|im_end|>\n")
    return f"<s>{seed}\n"


def call(name, arguments, id):
    return {"id": id, "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}


PLUGIN_MESSAGES = [
    {"role": "user", "content": "我想了解今天上海的天气"},
    {"role": "assistant", "content": "好的，我将为你查询上海的天气。",
     "tool_calls": [call("get_current_weather", {"location": "Shanghai"}, "call_0")]},
    {"role": "tool", "tool_call_id": "call_0", "content": '{"temperature": 22}'},
    {"role": "assistant", "content": "上海的天气是 22 摄氏度"},
]
INTERPRETER_MESSAGES = [
    {"role": "user", "content": "请帮我对该数据集进行数据处理并可视化。\n"},
    {"role": "user", "name": "file", "content": "[{\"path\": \"data.csv\", size='10K'}]"},
    {"role": "assistant", "content": "我已经帮您处理了数据并进行了可视化。\n\n",
     "tool_calls": [call("python", {"code": CODE}, "call_1")]},
    {"role": "tool", "tool_call_id": "call_1", "name": "python", "content": "![image](xxx.png)\n"},
    {"role": "assistant", "content": ANSWER_1},
    {"role": "user", "content": "你能解释一下代码吗"},
    {"role": "assistant", "content": ANSWER_2},
]
