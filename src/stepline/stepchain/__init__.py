"""Chains of BMAD step files, the one mechanism both families use (issue 25): micro-file workflows
(:mod:`stepline.bmad`) and Agent Skills (:mod:`stepline.skills`) are both a step file at a time, each ending at
a menu, a halt or the link to the next file.

``_read`` reads what a step file asks of a person (its menu, its halts) and never imports the engine, so the
families' readers use it; ``_menus`` gives each option its route; ``_chain`` runs a chain's steps with the
engine: visits, hand-overs, a menu asked of the person (or of the executor in #yolo) and settled, side trips.
"""
