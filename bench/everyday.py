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

NEW_USER_FACTS = [
    "Ines is allergic to penicillin",
    "Production uses PostgreSQL 16 on a managed cluster in Frankfurt",
    "I have been vegan since 2019",
    "I injured my left knee skiing last winter and avoid jumping exercises",
    "I prefer early returns over nested if blocks in code reviews",
    "I use Neovim as my editor",
    "Answer me in British English spelling",
    "my sister ana is a nurse on the night shift",
    "The office door code is 8820",
    "We moved to Lisbon in 2015",
    "I drive a blue Toyota Corolla",
    "I drink green tea every morning, never coffee",
    "The team's standup is at 9:30 every weekday",
    "Our cat Miso needs a kidney diet",
    "My manager is Priya Raman",
    "The staging server is called orion",
    "I am learning Japanese on Duolingo",
    "The project deploys with GitHub Actions",
    "My daughter's school play is on the 14th",
    "I am allergic to shellfish",
]
"""A new user's store: one-line facts of the kind an assistant stores, some of them standing
preferences that a request bears on without naming them."""

NEW_USER_ANSWERABLE = {
    "what medicine must Ines avoid?": "Ines is allergic to penicillin",
    "which Postgres version runs in production?": "Production uses PostgreSQL 16 on a managed cluster in Frankfurt",
    "Does Ana work at night?": "my sister ana is a nurse on the night shift",
    "what is 8820?": "The office door code is 8820",
    "what happened in 2015?": "We moved to Lisbon in 2015",
    "what am I alergic to": "I am allergic to shellfish",
    "what car do I have?": "I drive a blue Toyota Corolla",
    "tea?": "I drink green tea every morning, never coffee",
    "when is standup?": "The team's standup is at 9:30 every weekday",
    "what food does Miso need?": "Our cat Miso needs a kidney diet",
    "who is my manager?": "My manager is Priya Raman",
    "which server is staging?": "The staging server is called orion",
    "how do we deploy?": "The project deploys with GitHub Actions",
    # requests that a standing preference bears on without naming it
    "suggest a dinner recipe for me": "I have been vegan since 2019",
    "plan a workout for this week": "I injured my left knee skiing last winter and avoid jumping exercises",
    "review this function for style": "I prefer early returns over nested if blocks in code reviews",
    "how do I set up a keybinding in my editor?": "I use Neovim as my editor",
    "write a short note about colour choices": "Answer me in British English spelling",
}

NEW_USER_UNRELATED = [
    "what is the capital of Australia?",
    "explain how TCP handshakes work",
    "Who won the 1998 World Cup?",
    "translate 'good morning' into German",
    "what's the boiling point of water at altitude?",
    "When did Caroline go to the support group?",
    "how many moons does Jupiter have?",
    "what does HTTP 418 mean?",
]
