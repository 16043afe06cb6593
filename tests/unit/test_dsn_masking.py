"""No password in clear in a message ("--dsn is given twice" printed both DSNs whole).
Every message that shows a connection string masks its password, and so do the errors libpq
writes about a string it could not parse (they quote it)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from console.db.connect import connect
from console.operator.cli import app
from console.shared.dsn import mask_secrets, masked_dsn
from console.shared.errors import LeasectlError

SECRET = "s3cret-Pw"


@pytest.mark.parametrize("dsn, shown", [
    (f"postgresql://alice:{SECRET}@db.example:5432/jobs", "postgresql://alice:***@db.example:5432/jobs"),
    (f"postgres://alice:{SECRET}@h1,h2/jobs?sslmode=require", "postgres://alice:***@h1,h2/jobs?sslmode=require"),
    (f"postgresql://alice@db/jobs?password={SECRET}&sslmode=require",
     "postgresql://alice@db/jobs?password=***&sslmode=require"),
    (f"host=db user=alice password={SECRET} dbname=jobs", "host=db user=alice password=*** dbname=jobs"),
    (f"host=db password = '{SECRET} with space' dbname=jobs", "host=db password = *** dbname=jobs"),
    (f"host=db sslpassword={SECRET}", "host=db sslpassword=***"),
    (f"postgresql//alice:{SECRET}@db/jobs", "postgresql//alice:***@db/jobs"),  # a typo libpq echoes
    ("postgresql://postgres:@/leasectl_demo?host=/tmp/x", "postgresql://postgres:@/leasectl_demo?host=/tmp/x"),
    ("host=db user=alice dbname=jobs", "host=db user=alice dbname=jobs"),
    ("", ""),
])
def test_masked_dsn(dsn, shown):
    assert masked_dsn(dsn) == shown


def test_a_message_about_a_dsn_loses_that_dsn_s_password_wherever_it_is():
    dsn = "postgresql://alice:s3%zzcret@db/jobs"
    said = mask_secrets('invalid percent-encoded token: "s3%zzcret"', dsn)
    assert "s3%zzcret" not in said and "***" in said


def run_cli(*args: str):
    result = CliRunner().invoke(app, list(args), env={"USER": "masking-tester", "LEASECTL_DSN": "",
                                                      "DATABASE_URL": ""})
    assert "Traceback" not in result.output, result.output
    return result


@pytest.mark.parametrize("early, late", [
    (f"postgresql://alice:{SECRET}@127.0.0.1:1/a", f"postgresql://alice:{SECRET}-2@127.0.0.1:1/b"),
    (f"host=127.0.0.1 port=1 password={SECRET}", f"host=127.0.0.1 port=1 password='{SECRET} 2'"),
])
def test_dsn_given_twice_masks_both(early, late):
    result = run_cli("--dsn", early, "jobs", "--dsn", late)
    assert result.exit_code == 2 and "given twice" in result.output, result.output
    assert SECRET not in result.output and "***" in result.output, result.output


@pytest.mark.parametrize("dsn", [f"postgresql//alice:{SECRET}@127.0.0.1/jobs",
                                 "postgresql://alice:s3cret%zz@127.0.0.1/jobs"])
def test_libpq_s_words_about_a_bad_string_are_masked(dsn):
    result = run_cli("jobs", "--dsn", dsn)
    assert result.exit_code == 2 and "bad connection string" in result.output, result.output
    assert SECRET not in result.output and "s3cret%zz" not in result.output, result.output
    with pytest.raises(LeasectlError) as refused:
        connect(dsn)
    assert SECRET not in str(refused.value) and "s3cret%zz" not in str(refused.value)
