"""The test cells' machinery, one module per notebook: builders of evidence, consoles and
tables, generators of cases from a random source the cell passes in, reference computations and
assertions with their feedback wording. A test cell keeps its cases (hidden ones included: their
data, expected answers and seeds stay in the cell, between its hidden markers) and reads as a
list of checks calling these.

Nothing here holds a hidden case. It runs in the grader's kernel (and a learner's, for the
visible tests); it is absent from every world a learner's code runs in
(:data:`dtlab.course.world.GRADERS_ONLY`), since some of it computes answers.
"""
