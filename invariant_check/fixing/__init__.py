"""--fix and --diff: applying the fixes the rules build, verifying and writing the result.
"""
