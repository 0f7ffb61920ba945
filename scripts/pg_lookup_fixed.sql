-- Upper bound for PostgreSQL (reported, not compared): exact `phone = $1` lookup, always of the
-- same existing phone (passed with -D phone=...), so the same hot pages every time.
SELECT uid, name, phone, idcard, city FROM people WHERE phone = :phone;
