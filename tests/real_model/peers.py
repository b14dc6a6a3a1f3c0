#!/usr/bin/env python3
"""The same model, server and tasks as harness.py, through the two loops agent builders reach
for instead: LangChain's classic ReAct agent (zero-shot ReAct description, parsing errors
handed back to the model) and LangGraph's prebuilt ReAct agent (native tool calls). Each gets
the same tools as `reactstep run`, confined to the same workspace, and the same step limit.

    peers.py --work target/real-model [--temperatures 0] [--max-iterations 5] [--summary F]

LangChain and LangGraph are installed into the harness's virtual environment the first time.
"""

import argparse
import inspect
import json
import os
import shutil
import sys
import time
from pathlib import Path

import harness

PEERS = ["langchain==1.5.2", "langchain-classic==1.0.8", "langchain-openai==1.7.4", "langgraph==1.2.24"]


def workspace_tools(root: Path):
    """The built-in tools of `reactstep run`, as plain functions over the workspace."""

    def inside(path: str) -> Path:
        target = (root / path.strip().strip("'\"")).resolve()
        if root.resolve() not in [target, *target.parents]:
            raise ValueError(f"{path} is outside the workspace")
        return target

    def read_file(path: str) -> str:
        """Read a file of the workspace; path relative to its root."""
        return inside(path).read_text()

    def list_directory(path: str = ".") -> str:
        """List a folder of the workspace; path relative to its root."""
        return "\n".join(sorted(p.name + ("/" if p.is_dir() else "") for p in inside(path).iterdir()))

    def grep_search(pattern: str) -> str:
        """Lines of the workspace's files holding the text pattern, as path:line: text."""
        hits = []
        for file in sorted(root.rglob("*")):
            if file.is_file():
                for n, line in enumerate(file.read_text().splitlines(), 1):
                    if pattern.strip().strip("'\"") in line:
                        hits.append(f"{file.relative_to(root)}:{n}: {line}")
        return "\n".join(hits) or "no match"

    def calculator(expression: str) -> str:
        """Evaluate arithmetic: + - * / % and parentheses."""
        allowed = set("0123456789+-*/%(). ")
        if not set(expression) <= allowed:
            return "only numbers and + - * / % ( ) are allowed"
        return str(eval(expression, {"__builtins__": {}}))  # checked above: arithmetic only

    def string_helper(operation: str, text: str) -> str:
        """length, upper, lower or trim of a text."""
        ops = {"length": lambda t: str(len(t)), "upper": str.upper, "lower": str.lower, "trim": str.strip}
        return ops[operation](text) if operation in ops else f"unknown operation {operation}"

    return [observed(f) for f in (read_file, list_directory, grep_search, calculator, string_helper)]


def observed(tool):
    """A tool whose failure is an observation the model reads, as in `reactstep run`."""

    def call(*args, **kwargs):
        try:
            return tool(*args, **kwargs)
        except Exception as e:  # every failure of a tool is the model's to read
            return f"error: {e}"

    call.__name__, call.__doc__ = tool.__name__, tool.__doc__
    call.__signature__ = inspect.signature(tool)
    call.__annotations__ = tool.__annotations__
    return call


def chat_model(port: int, temperature: float):
    from langchain_openai import ChatOpenAI

    return ChatOpenAI(
        base_url=f"http://127.0.0.1:{port}/v1", api_key="none", model=harness.MODEL_NAME,
        temperature=temperature, max_tokens=1024, timeout=300,
    )


def langchain_classic(port, root, task, temperature, max_iterations) -> str:
    from langchain_classic.agents import AgentType, Tool, initialize_agent

    def single_input(f):
        if f.__name__ == "string_helper":
            return lambda text: f(*(text.split(" ", 1) + [""])[:2])
        return f

    tools = [Tool(name=f.__name__, func=single_input(f), description=f.__doc__) for f in workspace_tools(root)]
    agent = initialize_agent(
        tools, chat_model(port, temperature), agent=AgentType.ZERO_SHOT_REACT_DESCRIPTION,
        max_iterations=max_iterations, handle_parsing_errors=True,
    )
    return agent.invoke({"input": task["question"]})["output"]


def langgraph_prebuilt(port, root, task, temperature, max_iterations) -> str:
    from langchain_core.tools import tool
    from langgraph.prebuilt import create_react_agent

    agent = create_react_agent(chat_model(port, temperature), [tool(f) for f in workspace_tools(root)])
    state = agent.invoke(
        {"messages": [("user", task["question"])]}, {"recursion_limit": 2 * max_iterations + 1}
    )
    return state["messages"][-1].content


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--work", required=True, type=Path)
    parser.add_argument("--temperatures", default="0")
    parser.add_argument("--max-iterations", type=int, default=5)
    parser.add_argument("--window", type=int, default=4096)
    parser.add_argument("--summary", type=Path)
    args = parser.parse_args()
    python = harness.python_with_server(args.work)
    if Path(sys.prefix).resolve() != python.parent.parent.resolve():
        # The peers live in the harness's virtual environment: run there.
        harness.pip(python, "install", "--quiet", *PEERS)
        os.execv(python, [str(python), __file__, *sys.argv[1:]])
    gguf = harness.model_file(args.work, python)
    spec = json.loads((harness.HERE / "tasks.json").read_text())
    server = harness.ModelServer(python, gguf, args.window)
    results = []
    try:
        for temperature in [float(t) for t in args.temperatures.split(",")]:
            for name, peer in [("langchain classic", langchain_classic), ("langgraph prebuilt", langgraph_prebuilt)]:
                for task in spec["tasks"]:
                    root = harness.make_workspace(spec["workspace"])
                    started = time.monotonic()
                    try:
                        answer, error = str(peer(server.port, root, task, temperature, args.max_iterations)), None
                    except Exception as e:  # a peer's own failure is its result
                        answer, error = "", f"{type(e).__name__}: {e}"[:300]
                    shutil.rmtree(root)
                    right = bool(answer) and any(x.lower() in answer.lower() for x in task["expect"])
                    result = {"task": task["id"], "harness": name, "temperature": temperature,
                              "success": right, "answer": answer[:300], "error": error,
                              "seconds": round(time.monotonic() - started, 1)}
                    print(json.dumps(result), flush=True)
                    results.append(result)
    finally:
        server.stop()
    if args.summary:
        args.summary.write_text(json.dumps({"model": harness.MODEL_NAME, "runs": results}, indent=1))


if __name__ == "__main__":
    main()
