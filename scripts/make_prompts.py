"""Writes specjax/data/prompts_train.jsonl, prompts_heldout.jsonl and prompts_train_extra.jsonl.

    python scripts/make_prompts.py

The project's own prompt set for distillation: chat questions, code, math,
rewriting, summarising and extraction, composed from templates and topic lists.
Each line is {"id", "category", "split", "text"}. The held-out split (about 15% of
each category, chosen by a fixed seed) is never used for training; it is where
acceptance rates are measured. The extra training split (`train_extra`) holds template
combinations that neither split uses (and fresh math problems): more training data for
configs that ask for it (`config.prompts.train_sets`), disjoint from both. Rerunning
reproduces the files byte for byte.
"""
import itertools
import json
import os
import random

TOPICS = ["photosynthesis", "black holes", "the water cycle", "inflation", "vaccines",
          "plate tectonics", "the French Revolution", "machine learning", "compound interest",
          "the immune system", "renewable energy", "the Roman Empire", "climate change",
          "DNA replication", "the stock market", "volcanoes", "the internet", "gravity",
          "antibiotics", "the printing press", "sleep", "coral reefs", "electric cars",
          "honey bees", "the moon landing", "recycling", "earthquakes", "blockchain",
          "the human heart", "rainbows", "supply and demand", "tides", "jazz music",
          "the Great Wall of China", "batteries", "memory in the brain", "democracy",
          "solar panels", "bread baking", "the Olympic Games"]
AUDIENCES = ["a five-year-old", "a high school student", "a busy manager", "a beginner",
             "someone who has never heard of it"]
CHAT_TEMPLATES = [
    "Tell me about {t}.", "Explain {t} to {a}.", "Why does {t} matter?",
    "Give me three interesting facts about {t}.", "How would you describe {t} in one paragraph?",
    "What are the main advantages and disadvantages of {t}?",
    "Write a short quiz question about {t} and give the answer.",
    "What is a common misconception about {t}?",
]
ADVICE = ["How can I sleep better?", "How do I start learning to cook?",
          "What should I pack for a weekend hiking trip?", "How can I be more productive when working from home?",
          "How do I prepare for a job interview?", "What are good habits for saving money?",
          "How can I learn a new language quickly?", "How do I keep houseplants alive?",
          "What is a good way to start running?", "How should I organise my week?",
          "How can I make a presentation less boring?", "How do I write a polite complaint email?",
          "What are some tips for studying for exams?", "How can I reduce stress?",
          "How do I choose a good laptop?", "How can I make friends in a new city?"]
CODE_TASKS = ["reverse a string", "check whether a number is prime", "compute the factorial of n",
              "find the largest element in a list", "count the vowels in a string",
              "merge two sorted lists", "remove duplicates from a list while keeping order",
              "compute the n-th Fibonacci number", "check whether a string is a palindrome",
              "flatten a nested list", "convert Celsius to Fahrenheit", "sum the digits of an integer",
              "find the most common word in a text", "compute the greatest common divisor of two numbers",
              "sort a list of dictionaries by a key", "read a CSV file and print the first row",
              "validate an email address with a regular expression", "implement binary search",
              "count the lines in a file", "transpose a matrix"]
LANGS = ["Python", "JavaScript", "C", "Rust", "Go"]
CODE_TEMPLATES = ["Write a {l} function to {c}.", "How do I {c} in {l}?",
                  "Write {l} code to {c} and explain it briefly.", "Show a short {l} example that shows how to {c}."]
CODE_EXPLAIN = [
    "Explain what this Python code does:\n\nfor i in range(3):\n    print(i * i)",
    "Find the bug in this code:\n\ndef add(a, b):\n    return a - b",
    "What does `list(map(str.upper, ['a', 'b']))` return in Python?",
    "Explain the difference between a list and a tuple in Python.",
    "What is a race condition? Give a small example.",
    "Explain what a hash map is and when to use one.",
    "What does the SQL query `SELECT name FROM users WHERE age > 30;` do?",
    "Explain recursion with a simple example.",
    "What is the time complexity of binary search and why?",
    "Explain what `git rebase` does compared to `git merge`.",
    "Rewrite this loop as a list comprehension:\n\nsquares = []\nfor x in range(10):\n    squares.append(x * x)",
    "What is the difference between `==` and `is` in Python?",
]
NAMES = ["Anna", "Ben", "Carla", "David", "Elena", "Farid", "Grace", "Hugo", "Iris", "Jonas"]
ITEMS = ["apples", "pencils", "books", "marbles", "cookies", "stickers", "tickets", "coins"]


def math_prompts(rng):
  out = []
  for _ in range(70):
    kind = rng.randrange(7)
    a, b, c = rng.randint(2, 99), rng.randint(2, 50), rng.randint(2, 12)
    n1, n2 = rng.sample(NAMES, 2)
    it = rng.choice(ITEMS)
    if kind == 0:
      out.append(f"What is {a} times {b}? Show your work.")
    elif kind == 1:
      out.append(f"{n1} has {a} {it} and gives {b % a + 1} of them to {n2}. How many {it} does {n1} have left?")
    elif kind == 2:
      out.append(f"Solve for x: {c}x + {b} = {c * a + b}.")
    elif kind == 3:
      out.append(f"A shop sells {it} at {c} dollars each. How much do {b} {it} cost?")
    elif kind == 4:
      out.append(f"What is {a}% of {b * 10}?")
    elif kind == 5:
      out.append(f"A train travels {a * c} kilometres in {c} hours. What is its average speed?")
    else:
      out.append(f"What is the area of a rectangle that is {a} cm long and {b} cm wide?")
  out += ["Is 91 a prime number? Explain.", "What is the derivative of x^3 + 2x?",
          "Explain what a prime number is with examples.", "What is the sum of the angles in a triangle?",
          "Convert 3/8 to a decimal.", "What is the square root of 144?",
          "Explain the Pythagorean theorem.", "How many seconds are there in a day?"]
  return out


SENTENCES = [
    "The meeting has been moved to Thursday because the manager is travelling.",
    "Our new product launch was a success and sales increased by twenty percent.",
    "Please remember to submit your reports before the end of the week.",
    "The weather was terrible, so we stayed inside and played board games all day.",
    "The city council approved the plan to build a new park near the river.",
    "I am writing to inform you that your order has been shipped.",
    "Scientists discovered a new species of frog in the rainforest last year.",
    "The library will be closed on Monday for maintenance.",
    "Due to high demand, delivery times may be longer than usual.",
    "He forgot his keys at home and had to wait outside for an hour.",
    "The team worked late every night to finish the project on time.",
    "Exercise improves mood, sleep and overall health.",
]
REWRITES = ["Rewrite this sentence in a more formal tone: {s}", "Rewrite this sentence for a child: {s}",
            "Paraphrase the following sentence: {s}", "Make this sentence shorter: {s}",
            "Rewrite this as a friendly text message: {s}", "Translate this sentence into French: {s}",
            "Fix the grammar and make this more polished: {s}"]
PASSAGES = [
    "Honey bees live in colonies with a single queen, thousands of female workers and a few hundred male drones. "
    "Workers collect nectar and pollen, build the comb and care for the young. In winter the colony clusters "
    "together to keep warm, eating the honey it stored during the summer.",
    "The printing press, developed by Johannes Gutenberg around 1440, made books far cheaper to produce. "
    "Literacy spread, scientific ideas travelled faster, and the Reformation used printed pamphlets to reach "
    "ordinary people across Europe.",
    "Electric cars use batteries instead of petrol engines. They produce no exhaust, are quiet and cheap to run, "
    "but they can take a long time to charge, and building the batteries requires mining metals such as lithium.",
    "Sleep helps the brain store memories and clear waste products. Adults need about seven to nine hours a night. "
    "Screens before bed, caffeine and irregular schedules all make it harder to fall asleep.",
    "Coral reefs cover less than one percent of the ocean floor but support about a quarter of marine species. "
    "Warmer water causes corals to expel the algae living in them, which turns them white, a process called bleaching.",
    "The company reported revenue of 4.2 million dollars in the third quarter, up from 3.1 million a year earlier. "
    "Costs rose as well, mainly because of new hires, and the firm expects growth to continue next year.",
    "Volcanoes form where magma from inside the Earth reaches the surface. Some erupt explosively, throwing ash "
    "high into the air, while others release slow rivers of lava. Volcanic soil is often very fertile.",
    "Remote work became common during the pandemic. Many employees enjoy the flexibility and saved commuting time, "
    "while some managers worry about communication and team spirit.",
]
SUMMARY_TEMPLATES = ["Summarise the following text in one sentence:\n\n{p}",
                     "Give a short summary of this paragraph:\n\n{p}",
                     "List the key points of this text as bullet points:\n\n{p}",
                     "Write a title for this text:\n\n{p}"]
EXTRACT_TEXTS = [
    "Hi, my name is Laura Martin, I am 34 years old and I work as a nurse in Lyon. You can reach me at laura.martin@example.com.",
    "Order #4521: 3 notebooks at $2.50 each, 1 backpack at $30, shipped to 12 Oak Street, Denver on March 3.",
    "The conference takes place from 14 to 16 June in Berlin. Registration costs 250 euros and closes on 1 May.",
    "Dr. Ahmed Khan will give a talk on climate modelling at 3 pm on Friday in Room 204.",
    "Flight BA117 departs London Heathrow at 11:40 and arrives in New York JFK at 14:25 local time.",
    "The recipe needs 200 g of flour, 2 eggs, 100 ml of milk and a pinch of salt; bake for 25 minutes at 180 degrees.",
    "Meeting notes: Sara will update the budget, Tom will contact the supplier, and the next meeting is on Tuesday.",
    "Product: Solar lamp. Price: 19.99. Battery: 2000 mAh. Colours: black, white. Warranty: 2 years.",
]
EXTRACT_TEMPLATES = ["Extract all names, dates and places from this text:\n\n{x}",
                     "Return the key facts in this text as JSON:\n\n{x}",
                     "What numbers appear in this text and what do they refer to?\n\n{x}",
                     "Extract the main entities from this text as a list:\n\n{x}"]
CREATIVE = ["Write a haiku about {t}.", "Write a short poem about {t}.",
            "Write the opening sentence of a story about {t}.", "Suggest five names for a podcast about {t}."]


def build(seed: int = 0):
  rng = random.Random(seed)
  cats = {}
  chat = [tpl.format(t=t, a=rng.choice(AUDIENCES)) for t, tpl in itertools.product(TOPICS, CHAT_TEMPLATES)]
  rng.shuffle(chat)
  unused = {"chat": chat[110:]}  # template combinations left for the extra split
  cats["chat"] = chat[:110] + ADVICE
  code = [tpl.format(l=l, c=c) for c, l, tpl in itertools.product(CODE_TASKS, LANGS, CODE_TEMPLATES)]
  rng.shuffle(code)
  unused["code"] = code[70:]
  cats["code"] = code[:70] + CODE_EXPLAIN
  cats["math"] = math_prompts(rng)
  rewrite = [tpl.format(s=s) for s, tpl in itertools.product(SENTENCES, REWRITES)]
  rng.shuffle(rewrite)
  unused["rewrite"] = rewrite[60:]
  cats["rewrite"] = rewrite[:60]
  cats["summarise"] = [tpl.format(p=p) for p, tpl in itertools.product(PASSAGES, SUMMARY_TEMPLATES)]
  cats["extraction"] = [tpl.format(x=x) for x, tpl in itertools.product(EXTRACT_TEXTS, EXTRACT_TEMPLATES)]
  creative = [tpl.format(t=t) for t, tpl in itertools.product(TOPICS, CREATIVE)]
  rng.shuffle(creative)
  unused["creative"] = creative[30:]
  cats["creative"] = creative[:30]
  rows = {"train": [], "heldout": []}
  for cat, texts in cats.items():
    texts = list(dict.fromkeys(texts))  # dedupe, keep order
    rng.shuffle(texts)
    n_held = max(4, round(0.15 * len(texts)))
    for i, text in enumerate(texts):
      split = "heldout" if i < n_held else "train"
      rows[split].append({"id": f"{cat}-{i:03d}", "category": cat, "split": split, "text": text})
  rows["train_extra"] = build_extra(unused, {r["text"] for rs in rows.values() for r in rs})
  return rows


EXTRA_COUNTS = {"chat": 100, "code": 80, "math": 60, "rewrite": 24, "creative": 40}


def build_extra(unused: dict, taken: set, seed: int = 1) -> list:
  """The extra training split: EXTRA_COUNTS prompts per category drawn from the unused
  template combinations (math: fresh problems), none of them in `taken`."""
  rng = random.Random(seed)
  cats = dict(unused, math=math_prompts(rng))
  out = []
  for cat, n in EXTRA_COUNTS.items():
    texts = [t for t in dict.fromkeys(cats[cat]) if t not in taken]
    rng.shuffle(texts)
    out += [{"id": f"{cat}-x{i:03d}", "category": cat, "split": "train_extra", "text": t}
            for i, t in enumerate(texts[:n])]
  return out


def main():
  out_dir = os.path.join(os.path.dirname(__file__), "..", "specjax", "data")
  for split, rows in build().items():
    with open(os.path.join(out_dir, f"prompts_{split}.jsonl"), "w", encoding="utf-8") as f:
      for r in rows:
        f.write(json.dumps(r, ensure_ascii=False) + "\n")
    print(split, len(rows))


if __name__ == "__main__":
  main()
