-- The Nexmark stream (NexmarkGen, GENERATOR.md) as one table, in the shape of Nexmark's own source table:
-- one nullable ROW per event type, a computed event-time column and a 4 s bounded-delay watermark.
-- ${EVENTS}, ${TPS}, ${BLOCK} are filled in by the harness (integration-tests/src/nexmark.rs, scripts/nexmark.sh).
CREATE TABLE datagen (
    event_type INT,
    person ROW<
        id BIGINT,
        name VARCHAR,
        emailAddress VARCHAR,
        creditCard VARCHAR,
        city VARCHAR,
        state VARCHAR,
        `dateTime` TIMESTAMP(3),
        extra VARCHAR>,
    auction ROW<
        id BIGINT,
        itemName VARCHAR,
        description VARCHAR,
        initialBid BIGINT,
        reserve BIGINT,
        `dateTime` TIMESTAMP(3),
        expires TIMESTAMP(3),
        seller BIGINT,
        category BIGINT,
        extra VARCHAR>,
    bid ROW<
        auction BIGINT,
        bidder BIGINT,
        price BIGINT,
        channel VARCHAR,
        url VARCHAR,
        `dateTime` TIMESTAMP(3),
        extra VARCHAR>,
    `dateTime` AS CASE event_type
        WHEN 0 THEN person.`dateTime`
        WHEN 1 THEN auction.`dateTime`
        ELSE bid.`dateTime`
    END,
    WATERMARK FOR `dateTime` AS `dateTime` - INTERVAL '4' SECOND
) WITH (
    'connector' = 'nexmark',
    'events' = '${EVENTS}',
    'tps' = '${TPS}',
    'block' = '${BLOCK}'
);
