"""What a rule author uses: the Rule class (rule), the records a finding carries (types: Finding,
Edit, Fix, Option, Valid, Invalid), the registry of rules, and the edit helpers of the fix
builders (edits). The rules live in invariant_check.rules; the harness is invariant_check.testing.
"""
