"""Retrieval quality of the knowledge base on a real corpus: hit@1, hit@5 and MRR@5 per search mode.

    /work/main/.venv/bin/python bench/retrieval.py [--dense] [--fusions]

The corpus is text no one here wrote: the plain-text documentation (`pydoc`) of the standard-library modules in
QUESTIONS, as this Python renders it, one document per module. The questions were written by hand, one per
module, before any figure was measured and not edited after: each asks for what the module does in everyday
words and never names it. A question's answer is its module's document.

Each document goes through the service (`document_ingest`: chunked, embedded, indexed) of a fresh user on a
temporary SQLite database (DATABASE_URL is ignored). Each search asks for 50 chunks; the documents of those
chunks, in order and without repeats, are the ranking: hit@k = the answer is among the first k documents,
MRR@5 = the mean of 1/rank of the answer within the first 5 (0 when it is not there).

The floor: `rank_bm25.BM25Okapi` (the `rank-bm25` package, dev extra) over the same chunks, tokenised as
lower-cased `\\w+` runs, ranked the same way.

--fusions also measures the fusion alternatives of knowledge.ranking (the weighted sum and RRF) over the
vector and lexical rankers at several weights, on each half of the questions and on all of them.
--dense requires a ranker named `dense` registered by an installed extra: it is
measured alone, and `hybrid + dense` fuses every registered ranker (what the service does when it is installed).
"""

from __future__ import annotations

import argparse
import os
import pydoc
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SEARCH_DEPTH = 50  # chunks asked for per search (the API's maximum topK)

# module -> a question in everyday words that does not name it.
QUESTIONS = {
    "heapq": "keep a priority queue where the smallest item always comes out first",
    "bisect": "insert into a sorted list while keeping it sorted, finding the position by binary search",
    "collections": "a dictionary that counts how many times each element appears",
    "itertools": "build an iterator that returns every possible ordering of the items of a sequence",
    "functools": "cache the results of a function so repeated calls with the same arguments are fast",
    "json": "turn a dictionary into text that a JavaScript program can read, and parse such text back",
    "csv": "read a spreadsheet exported as comma separated values row by row",
    "re": "find every place a pattern of characters matches in a string and extract the groups",
    "datetime": "add a number of days to a date and compute the difference between two times",
    "calendar": "print the days of a month laid out in weeks and tell whether a year is a leap year",
    "random": "pick a random element from a list or shuffle it in place",
    "statistics": "compute the median and the standard deviation of some numbers",
    "math": "the greatest common divisor of two integers and the square root of a float",
    "fractions": "exact arithmetic with rational numbers like one third without rounding errors",
    "decimal": "arithmetic in base ten with a chosen precision for amounts of money",
    "hashlib": "compute a SHA-256 digest of some bytes",
    "hmac": "sign a message with a secret key so the receiver can verify it was not tampered with",
    "secrets": "generate a hard to guess token for a password reset link",
    "base64": "encode binary data as printable ASCII characters for an email attachment",
    "zlib": "compress bytes with the deflate algorithm and compute a checksum of them",
    "gzip": "read a .gz compressed file as if it were a normal file",
    "zipfile": "create an archive with several files in it that Windows can open",
    "tarfile": "unpack a tape archive, possibly compressed with bzip2",
    "shutil": "copy a whole directory tree and remove a directory with everything inside it",
    "glob": "list the files whose names match a wildcard pattern like *.txt",
    "tempfile": "create a file with a unique name that is deleted automatically when it is closed",
    "pathlib": "object-oriented filesystem paths: join path parts with a slash operator and get a file's suffix",
    "subprocess": "run another program, wait for it to finish and capture what it prints",
    "threading": "run several functions at the same time in one process and protect shared data with a lock",
    "multiprocessing": "use several CPU cores by starting worker processes in a pool",
    "queue": "a first-in first-out structure that threads can safely put items into and take items from",
    "asyncio": "write concurrent code with coroutines and an event loop using async and await",
    "socket": "open a low-level network connection to a host and port and send bytes",
    "urllib.parse": "split a web address into scheme, host, path and query string, and quote special characters",
    "http.client": "talk to a web server directly: send a request with headers and read the status code of the reply",
    "smtplib": "send an email through a mail server",
    "html": "escape the characters <, > and & so that text can be placed in a web page safely",
    "xml.etree.ElementTree": "parse a markup document into a tree of elements and find child nodes by tag",
    "sqlite3": "store data in a small embedded database file and run SQL queries on it",
    "pickle": "save an arbitrary Python object to bytes and load it back later",
    "copy": "make a deep copy of a nested list so that changing the copy leaves the original alone",
    "pprint": "print a nested data structure with nice indentation so that it is readable",
    "textwrap": "wrap a long paragraph so that no line is longer than 70 characters",
    "string": "a template with $name placeholders that get substituted, and constants of ASCII letters and digits",
    "difflib": "show which lines were added and removed between two versions of a text, "
               "and find close matches for a misspelled word",
    "unicodedata": "look up the official name and category of a character, and normalize accented characters",
    "struct": "pack integers and floats into bytes with a given byte order, to read a binary file format",
    "array": "a compact sequence of numbers that all have the same machine type, smaller than a list",
    "enum": "define a set of symbolic named constants with unique values",
    "dataclasses": "generate __init__ and __repr__ for a class automatically from its annotated fields",
    "typing": "type hints: a variable that may hold an int or None, and generic containers",
    "abc": "declare a base class whose methods every subclass must implement",
    "contextlib": "write a with-statement manager from a generator function",
    "argparse": "parse command-line options and arguments and print a usage message",
    "logging": "record messages at different severity levels to a file with timestamps",
    "time": "pause the program for some seconds and measure elapsed time with a monotonic clock",
    "timeit": "measure how long a small snippet of code takes to run, repeated many times",
    "uuid": "generate a random 128-bit identifier that is unique across machines",
    "traceback": "print the stack of function calls of an exception that was caught",
    "inspect": "get the signature and the source code of a function at run time",
    "weakref": "a reference to an object that does not prevent it from being destroyed, with a callback when it is",
    "gc": "force a collection of unreachable objects and find objects that are part of reference cycles",
    "operator": "functions for the standard operators, like getting an item or an attribute, for use as a sort key",
    "getpass": "ask the user for a password on the terminal without showing what they type",
    "platform": "find out which operating system and processor architecture the program runs on",
    "locale": "format numbers with the thousands separator of the user's country settings",
    "shlex": "split a command line string into arguments the way a Unix shell would, respecting quotes",
    "ipaddress": "check whether an address like 192.168.1.7 belongs to a subnet such as 192.168.0.0/16",
    "mimetypes": "guess the media type of a file from its extension",
    "wave": "read the frames, sample width and channel count of an uncompressed audio file",
    "colorsys": "convert colors between RGB and hue, saturation and value",
    "configparser": "read settings from an INI file with sections and key = value lines",
    "cmath": "the square root of a negative number, giving a complex result",
    "io": "treat a string in memory as a file object to read from and write to",
    "signal": "handle Ctrl-C or a termination request sent to the process by setting a handler",
    "atexit": "run a cleanup function when the interpreter exits",
    "graphlib": "order tasks so that each one comes after the tasks it depends on",
    "webbrowser": "open a URL in the user's default browser",
    "pdb": "step through a program line by line and inspect variables when it stops at a breakpoint",
    "cProfile": "find out which functions a program spends most of its time in",
    "doctest": "check that the examples in docstrings still produce the output they show",
    "unittest": "write test cases as classes with assertEqual methods and run them",
    "sys": "the list of command line arguments and the module search path, and exiting the interpreter with a status",
    "warnings": "tell the users of a function that it is deprecated without raising an error, and filter such notices",
}


def corpus() -> dict[str, str]:
    """module -> its pydoc plain text, as this Python renders it."""
    texts = {}
    for name in QUESTIONS:
        texts[name] = pydoc.render_doc(name, renderer=pydoc.plaintext)
    return texts


def setup_django(data_dir: str) -> None:
    sys.path.insert(0, str(ROOT))
    os.environ["AGENTSITE_DATA_DIR"] = data_dir
    os.environ["AGENTSITE_LOG_LEVEL"] = "WARNING"
    os.environ["AGENTSITE_KB_QUOTA_MB"] = "0"
    os.environ.pop("DATABASE_URL", None)
    os.environ.pop("REDIS_URL", None)
    os.environ["DJANGO_SETTINGS_MODULE"] = "agentsite.settings"
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)


def documents_in_order(chunk_ids: list[int], chunk_document: dict[int, str]) -> list[str]:
    seen: dict[str, None] = {}
    for chunk_id in chunk_ids:
        seen.setdefault(chunk_document[chunk_id], None)
    return list(seen)


def score(rankings: dict[str, list[str]]) -> dict[str, float]:
    """hit@1, hit@5, MRR@5 of {module: documents in order}."""
    hit1 = hit5 = reciprocal = 0.0
    for module, documents in rankings.items():
        top = documents[:5]
        if top[:1] == [module]:
            hit1 += 1
        if module in top:
            hit5 += 1
            reciprocal += 1 / (top.index(module) + 1)
    count = len(rankings)
    return {"hit@1": hit1 / count, "hit@5": hit5 / count, "MRR@5": reciprocal / count}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dense", action="store_true", help="measure the `dense` ranker (an installed extra)")
    parser.add_argument("--fusions", action="store_true", help="also measure the fusion alternatives")
    args = parser.parse_args()
    data_dir = tempfile.mkdtemp(prefix="agentsite-bench-retrieval-")
    try:
        setup_django(data_dir)
        run(dense=args.dense, fusions=args.fusions)
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)


def run(*, dense: bool, fusions: bool) -> None:
    from django.contrib.auth import get_user_model
    from rank_bm25 import BM25Okapi

    from knowledge import ranking
    from knowledge.models import Chunk
    from knowledge.services import document_ingest

    texts = corpus()
    owner = get_user_model().objects.create_user(username="retrieval", password=None)
    started = time.perf_counter()
    for name, text in texts.items():
        document_ingest(owner_id=owner.pk, filename=name, content=text)
    ingest_s = time.perf_counter() - started
    chunks = list(Chunk.objects.filter(document__owner=owner).values_list("id", "text", "document__filename"))
    chunk_document = {chunk_id: filename for chunk_id, _, filename in chunks}
    characters = sum(map(len, texts.values()))
    print(f"corpus: pydoc of {len(texts)} modules (Python {sys.version.split()[0]}), {characters:,} characters, "
          f"{len(chunks):,} chunks; {len(QUESTIONS)} questions; ingested in {ingest_s:.1f} s")

    rankers = {ranker.name: ranker for ranker in ranking.rankers()}
    if dense and "dense" not in rankers:
        raise SystemExit("--dense: no ranker named `dense` is registered (install the dense extra)")
    base = [rankers["vector"], rankers["lexical"]]
    systems = {
        "vector": lambda query: rankers["vector"].rank(owner.pk, query, SEARCH_DEPTH),
        "lexical": lambda query: rankers["lexical"].rank(owner.pk, query, SEARCH_DEPTH),
        "hybrid": lambda query: ranking.fuse(base, owner.pk, query, SEARCH_DEPTH),
    }
    if dense:
        systems["dense"] = lambda query: rankers["dense"].rank(owner.pk, query, SEARCH_DEPTH)
        systems["hybrid + dense"] = lambda query: ranking.fuse(ranking.rankers(), owner.pk, query, SEARCH_DEPTH)

    tokenized = [re.findall(r"\w+", text.lower()) for _, text, _ in chunks]
    bm25 = BM25Okapi(tokenized)
    ids = [chunk_id for chunk_id, _, _ in chunks]

    def floor(query: str) -> list[tuple[int, float]]:
        scores = bm25.get_scores(re.findall(r"\w+", query.lower()))
        best = sorted(range(len(ids)), key=lambda row: -scores[row])[:SEARCH_DEPTH]
        return [(ids[row], float(scores[row])) for row in best if scores[row] > 0]

    systems["floor: rank_bm25 BM25Okapi"] = floor
    print(f"{'system':34} {'hit@1':>6} {'hit@5':>6} {'MRR@5':>6} {'ms/query':>9}")
    for name, search in systems.items():
        rankings = {}
        started = time.perf_counter()
        for module, question in QUESTIONS.items():
            rankings[module] = documents_in_order([chunk_id for chunk_id, _ in search(question)], chunk_document)
        per_query = (time.perf_counter() - started) / len(QUESTIONS) * 1000
        figures = score(rankings)
        print(f"{name:34} {figures['hit@1']:6.3f} {figures['hit@5']:6.3f} {figures['MRR@5']:6.3f} {per_query:9.1f}")
    if fusions:
        fusion_sweep(base, owner.pk, chunk_document)


def fusion_sweep(base, owner_id: int, chunk_document: dict[int, str]) -> None:
    """hit@1, hit@5, MRR@5 of each fusion method at several vector weights (lexical 1.0), on each half of the
    questions (alternate ones) and on all: a weight chosen on one half can be checked on the other."""
    from knowledge import ranking

    modules = list(QUESTIONS)
    halves = {"even": modules[0::2], "odd": modules[1::2], "all": modules}
    lists = {module: [ranker.rank(owner_id, QUESTIONS[module], SEARCH_DEPTH) for ranker in base]
             for module in modules}
    print("fusion sweep (vector weight; lexical 1.0): hit@1 hit@5 MRR@5 on even | odd | all questions")
    for method, fusion in ranking.FUSIONS.items():
        for weight in (0.0, 0.1, 0.2, 0.3, 0.5, 0.7, 1.0):
            cells = []
            for half, members in halves.items():
                rankings = {module: documents_in_order(
                    [chunk_id for chunk_id, _ in fusion(lists[module], SEARCH_DEPTH, weights=[weight, 1.0])],
                    chunk_document) for module in members}
                figures = score(rankings)
                cells.append(f"{half} {figures['hit@1']:.3f} {figures['hit@5']:.3f} {figures['MRR@5']:.3f}")
            print(f"  {method:8} {weight:.1f}  " + " | ".join(cells))


if __name__ == "__main__":
    main()
