-- Lower bound for PostgreSQL (reported, not compared): exact `phone = ...` lookup of a random
-- existing phone, picked through a second table phone_by_n(n int primary key, phone text).
-- This costs PostgreSQL an extra index probe per query, which hbidx does not pay.
\set i random(1, :rows)
SELECT uid, name, phone, idcard, city FROM people
 WHERE phone = (SELECT phone FROM phone_by_n WHERE n = :i);
