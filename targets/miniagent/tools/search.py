"""search: rank the task's corpus documents by weighted word overlap with a query."""

import math
import re

SPEC = {
    "name": "search",
    "description": "Search the document collection; returns the best matching documents.",
    "parameters": {
        "type": "object",
        "properties": {
            "query": {"type": "string", "description": "words to look for"},
            "k": {"type": "integer", "description": "how many documents to return (default 3)"},
        },
        "required": ["query"],
    },
}

STOPWORDS = set("a an and are as at by did do does for from how in is it its many much of on or the to was "
                "were what when where which who whom why with".split())


def words(text):
    return [w for w in re.findall(r"[a-z0-9]+", text.lower()) if w not in STOPWORDS]


def run(args, task):
    query = str(args.get("query", ""))
    k = max(1, min(int(args.get("k") or 3), 10))
    corpus = task.get("corpus") or []
    if not corpus:
        return "no documents available"
    df = {}
    for doc in corpus:
        for w in set(words(doc["title"] + " " + doc["text"])):
            df[w] = df.get(w, 0) + 1
    q = set(words(query))

    def score(doc):
        have = set(words(doc["title"] + " " + doc["text"]))
        return sum(math.log(1 + len(corpus) / df[w]) for w in q & have)

    ranked = sorted(corpus, key=score, reverse=True)[:k]
    return "\n".join(f"[{d['id']}] {d['title']}: {d['text']}" for d in ranked if score(d) > 0) or "no match"
