"""An everyday store to judge the relevance decision by (``store/ranking/relevance.py``): facts a person
tells an assistant, questions they answer (one word, two words, names, loose phrasings) with
the memory that answers each, and questions none of them answers. ``tests/test_relevance.py``
holds the decision to them on a store of these facts alone; ``bench/ranking_cost.py`` asks
them again once the facts sit among thousands of other memories.
"""

from __future__ import annotations

FACTS = [
    "Ana is allergic to penicillin",
    "Project Atlas launches in March",
    "My dentist appointment is on Tuesday at 3pm",
    "Ana works as a nurse at Santa Maria hospital",
    "I prefer oat milk in my coffee",
    "Our wifi password is on the fridge",
    "Lukas Berger is my brother-in-law",
    "The kids' school starts at 8:15",
    "I run 5k every Saturday morning in the park",
    "My car is a 2015 Honda Civic, due for service in January",
    "We are vegetarian except for fish",
    "Marta's birthday is on June 3rd",
]

ANSWERABLE = {  # query -> the memory that answers it
    # one word, and two
    "penicillin": "Ana is allergic to penicillin",
    "Atlas": "Project Atlas launches in March",
    "dentist": "My dentist appointment is on Tuesday at 3pm",
    "wifi": "Our wifi password is on the fridge",
    "oat milk": "I prefer oat milk in my coffee",
    "Diet": "We are vegetarian except for fish",
    # names, and a rare word that matches exactly
    "Lukas": "Lukas Berger is my brother-in-law",
    "Berger": "Lukas Berger is my brother-in-law",
    "Honda": "My car is a 2015 Honda Civic, due for service in January",
    "Who is Lukas?": "Lukas Berger is my brother-in-law",
    "When is Marta's birthday?": "Marta's birthday is on June 3rd",
    "Where does Ana work?": "Ana works as a nurse at Santa Maria hospital",
    # phrased far from the memory's words
    "what car do I drive": "My car is a 2015 Honda Civic, due for service in January",
    "drug reactions": "Ana is allergic to penicillin",
    "How do I take my coffee?": "I prefer oat milk in my coffee",
    "exercise routine": "I run 5k every Saturday morning in the park",
    "what time does school begin": "The kids' school starts at 8:15",
    "When does the project ship?": "Project Atlas launches in March",
}

UNRELATED = [
    "volcano",
    "Kubernetes",
    "mortgage rate",
    "quantum physics",
    "How do I bake sourdough?",
    "Who won the 1998 World Cup?",
    "Where did I park at the airport?",
    "my cat's vet",
    "What is John's job?",  # a person the store has never heard of
    "When did Caroline go to the support group?",
    "Tokyo trip",
    "Paris",
]
