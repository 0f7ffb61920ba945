-- pgbench script compared with `hbidx bench`'s HTTP lookup by phone (see scripts/bench.sh).
--
-- Looks up ONE random existing person by phone through the people(phone) btree and returns
-- one row (uid + four columns). pgbench variables are integers, and the phones are random
-- 11-digit numbers, so pgbench cannot name an existing phone directly. Instead it draws a
-- number p in [pmin, pmax] (the smallest and largest phone in the table, passed with -D) and
-- asks for the first phone >= p. All phones have 11 digits, so text order = numeric order and
-- the row always exists. The cost is the same as `WHERE phone = $1`: one descent of the same
-- btree, one heap fetch, one row out; no second lookup to pick the key.
-- With -M prepared the number goes out as a bound text parameter, just like a driver would.
\set p random(:pmin, :pmax)
SELECT uid, name, phone, idcard, city FROM people WHERE phone >= :p ORDER BY phone LIMIT 1;
