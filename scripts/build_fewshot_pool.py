"""Build ``prompts/fewshot_pool.json``, the pool that N-rep's and DIN-SQL linking's few-shot
examples are retrieved from by similarity.

N-rep retrieves its examples from a train set and DIN-SQL samples its linking examples from one;
no train set is available to this project (only Spider's and BIRD's dev sets, which are evaluation
data and never examples). Spider's ``tables.json`` does hold the schemas of its 146 train
databases, so the pool is questions and SQL written for this project over those schemas
(:data:`EXAMPLES`, some with a BIRD-style hint), and the thirteen Spider train questions the
project shipped as N-rep's examples before. The train databases' SQLite files are not
available, so no example is executed: the test suite checks instead that every query parses and
names only tables and columns of its schema, and that no example is over a dev database.

The file keeps each schema once (``schemas``, the compact format of
:func:`sqlchorus.tools.examples.fewshot.compact_schema`) and the examples apart (``examples``)::

    python scripts/build_fewshot_pool.py --tables ../shared/data/spider/tables.json
    python scripts/build_fewshot_pool.py --tables ... --check   # exit 1 when out of date
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from sqlchorus.tools.examples import fewshot

POOL = Path(__file__).resolve().parent.parent / "prompts" / "fewshot_pool.json"

# (db_id, question, evidence, sql); evidence is BIRD's "hint": what a phrase of the question means.
EXAMPLES: list[tuple[str, str, str, str]] = [
    ("department_management", "How many department heads were born in Texas?", "",
     "SELECT count(*) FROM head WHERE born_state = 'Texas'"),
    ("department_management", "List the names of heads who manage a department with a budget above 10 billion, with the department's name.",
     "budget above 10 billion refers to Budget_in_Billions > 10",
     "SELECT T3.name, T1.Name FROM department AS T1 JOIN management AS T2 ON T1.Department_ID = T2.department_ID JOIN head AS T3 ON T2.head_ID = T3.head_ID WHERE T1.Budget_in_Billions > 10"),
    ("department_management", "In which states were at least three heads born?", "",
     "SELECT born_state FROM head GROUP BY born_state HAVING count(*) >= 3"),
    ("department_management", "Which departments have no temporary acting head?",
     "temporary acting head refers to temporary_acting = 'Yes'",
     "SELECT Name FROM department WHERE Department_ID NOT IN (SELECT department_ID FROM management WHERE temporary_acting = 'Yes')"),
    ("small_bank_1", "What is the total savings balance of all customers?", "",
     "SELECT sum(balance) FROM SAVINGS"),
    ("small_bank_1", "Find the name of the customer with the highest checking balance.", "",
     "SELECT T1.name FROM ACCOUNTS AS T1 JOIN CHECKING AS T2 ON T1.custid = T2.custid ORDER BY T2.balance DESC LIMIT 1"),
    ("small_bank_1", "Which customers have a savings balance below the average savings balance? Give their names.",
     "below the average savings balance refers to balance < AVG(SAVINGS.balance)",
     "SELECT T1.name FROM ACCOUNTS AS T1 JOIN SAVINGS AS T2 ON T1.custid = T2.custid WHERE T2.balance < (SELECT avg(balance) FROM SAVINGS)"),
    ("small_bank_1", "What is the combined checking and savings balance of each customer? List names and totals.", "",
     "SELECT T1.name, T2.balance + T3.balance FROM ACCOUNTS AS T1 JOIN CHECKING AS T2 ON T1.custid = T2.custid JOIN SAVINGS AS T3 ON T1.custid = T3.custid"),
    ("loan_1", "List the names of bank branches in the state of New York together with their number of customers.", "",
     "SELECT bname, no_of_customers FROM bank WHERE state = 'New York'"),
    ("loan_1", "What is the total amount of mortgage loans granted by each branch? Show the branch name and the total.",
     "mortgage loans refers to loan_type = 'Mortgages'",
     "SELECT T1.bname, sum(T2.amount) FROM bank AS T1 JOIN loan AS T2 ON T1.branch_ID = T2.branch_ID WHERE T2.loan_type = 'Mortgages' GROUP BY T1.bname"),
    ("loan_1", "Find the names of customers who have a loan larger than 3000.", "",
     "SELECT DISTINCT T1.cust_name FROM customer AS T1 JOIN loan AS T2 ON T1.cust_ID = T2.cust_ID WHERE T2.amount > 3000"),
    ("loan_1", "Which customers have a credit score below 100 and no loan at all?",
     "no loan refers to no_of_loans = 0",
     "SELECT cust_name FROM customer WHERE credit_score < 100 AND no_of_loans = 0"),
    ("loan_1", "Which cities have both a bank branch with more than 300 customers and one with fewer than 100 customers?", "",
     "SELECT city FROM bank WHERE no_of_customers > 300 INTERSECT SELECT city FROM bank WHERE no_of_customers < 100"),
    ("soccer_2", "How many players were accepted in tryouts?",
     "accepted refers to decision = 'yes'",
     "SELECT count(*) FROM Tryout WHERE decision = 'yes'"),
    ("soccer_2", "For each position, how many players tried out for it?", "",
     "SELECT pPos, count(*) FROM Tryout GROUP BY pPos"),
    ("soccer_2", "List the colleges whose enrollment is above the average enrollment, in alphabetical order.", "",
     "SELECT cName FROM College WHERE enr > (SELECT avg(enr) FROM College) ORDER BY cName"),
    ("soccer_2", "Which players tried out as goalie but never as striker? Give their names.", "",
     "SELECT T1.pName FROM Player AS T1 JOIN Tryout AS T2 ON T1.pID = T2.pID WHERE T2.pPos = 'goalie' EXCEPT SELECT T1.pName FROM Player AS T1 JOIN Tryout AS T2 ON T1.pID = T2.pID WHERE T2.pPos = 'striker'"),
    ("soccer_2", "Which state has the largest total college enrollment?", "",
     "SELECT state FROM College GROUP BY state ORDER BY sum(enr) DESC LIMIT 1"),
    ("school_finance", "What share of its budget did each school invest in 2002? Give the school name and the percentage.",
     "share of its budget invested refers to Budget_invested_percent; in 2002 refers to Year = 2002",
     "SELECT T1.School_name, T2.Budget_invested_percent FROM School AS T1 JOIN budget AS T2 ON T1.School_id = T2.School_id WHERE T2.Year = 2002"),
    ("school_finance", "Which donors gave more than 9 in total across all schools?", "",
     "SELECT donator_name FROM endowment GROUP BY donator_name HAVING sum(amount) > 9"),
    ("school_finance", "How many schools are there in each county?", "",
     "SELECT County, count(*) FROM School GROUP BY County"),
    ("school_finance", "Show the names of schools that have never received an endowment.", "",
     "SELECT School_name FROM School WHERE School_id NOT IN (SELECT School_id FROM endowment)"),
    ("movie_1", "What are the titles of movies directed by Steven Spielberg and released after 1980?", "",
     "SELECT title FROM Movie WHERE director = 'Steven Spielberg' AND year > 1980"),
    ("movie_1", "Which reviewers gave some movie the top rating? List each name once.",
     "the top rating refers to stars = 5",
     "SELECT DISTINCT T1.name FROM Reviewer AS T1 JOIN Rating AS T2 ON T1.rID = T2.rID WHERE T2.stars = 5"),
    ("movie_1", "What is the average rating of each movie? Show the title and the average stars, best first.", "",
     "SELECT T1.title, avg(T2.stars) FROM Movie AS T1 JOIN Rating AS T2 ON T1.mID = T2.mID GROUP BY T1.mID ORDER BY avg(T2.stars) DESC"),
    ("movie_1", "Find the titles of movies that no reviewer has rated.", "",
     "SELECT title FROM Movie WHERE mID NOT IN (SELECT mID FROM Rating)"),
    ("movie_1", "Which movie received the most ratings?", "",
     "SELECT T1.title FROM Movie AS T1 JOIN Rating AS T2 ON T1.mID = T2.mID GROUP BY T1.mID ORDER BY count(*) DESC LIMIT 1"),
    ("wine_1", "What are the names and prices of wines from 2008, most expensive first?", "",
     "SELECT Name, Price FROM wine WHERE Year = 2008 ORDER BY Price DESC"),
    ("wine_1", "How many red grape varieties are there?",
     "red grape refers to Color = 'Red'",
     "SELECT count(*) FROM grapes WHERE Color = 'Red'"),
    ("wine_1", "List the wineries whose wines are made from white grapes and scored above 90.",
     "white grapes refers to grapes.Color = 'White'; scored above 90 refers to Score > 90",
     "SELECT DISTINCT T2.Winery FROM grapes AS T1 JOIN wine AS T2 ON T1.Grape = T2.Grape WHERE T1.Color = 'White' AND T2.Score > 90"),
    ("wine_1", "What is the average wine price of each appellation in Sonoma County?", "",
     "SELECT T1.Appelation, avg(T2.Price) FROM appellations AS T1 JOIN wine AS T2 ON T1.Appelation = T2.Appelation WHERE T1.County = 'Sonoma' GROUP BY T1.Appelation"),
    ("wine_1", "Which wineries made wines both before 2006 and after 2010?", "",
     "SELECT Winery FROM wine WHERE Year < 2006 INTERSECT SELECT Winery FROM wine WHERE Year > 2010"),
    ("flight_1", "How many flights depart from Los Angeles?", "",
     "SELECT count(*) FROM flight WHERE origin = 'Los Angeles'"),
    ("flight_1", "What are the names of employees certified to fly an aircraft with a range longer than 5000?", "",
     "SELECT DISTINCT T1.name FROM employee AS T1 JOIN certificate AS T2 ON T1.eid = T2.eid JOIN aircraft AS T3 ON T2.aid = T3.aid WHERE T3.distance > 5000"),
    ("flight_1", "Which employees hold no certificate? Give their names and salaries.", "",
     "SELECT name, salary FROM employee WHERE eid NOT IN (SELECT eid FROM certificate)"),
    ("flight_1", "Which aircraft is flown on the most flights? Give its name.",
     "flown on the most flights refers to MAX(COUNT(flight.flno))",
     "SELECT T2.name FROM flight AS T1 JOIN aircraft AS T2 ON T1.aid = T2.aid GROUP BY T1.aid ORDER BY count(*) DESC LIMIT 1"),
    ("flight_1", "Show the origin and destination of the flights priced above the average flight price.", "",
     "SELECT origin, destination FROM flight WHERE price > (SELECT avg(price) FROM flight)"),
    ("dorm_1", "What are the names of dorms that can hold more than 300 students?", "",
     "SELECT dorm_name FROM Dorm WHERE student_capacity > 300"),
    ("dorm_1", "How many students live in each dorm? Show the dorm names and the counts.", "",
     "SELECT T1.dorm_name, count(*) FROM Dorm AS T1 JOIN Lives_in AS T2 ON T1.dormid = T2.dormid GROUP BY T1.dormid"),
    ("dorm_1", "Which amenities does the largest dorm have?",
     "the largest dorm refers to MAX(student_capacity)",
     "SELECT T1.amenity_name FROM Dorm_amenity AS T1 JOIN Has_amenity AS T2 ON T1.amenid = T2.amenid WHERE T2.dormid = (SELECT dormid FROM Dorm ORDER BY student_capacity DESC LIMIT 1)"),
    ("dorm_1", "Find the first names of students older than 20 who live in a dorm with a TV Lounge.", "",
     "SELECT T1.Fname FROM Student AS T1 JOIN Lives_in AS T2 ON T1.StuID = T2.stuid WHERE T1.Age > 20 AND T2.dormid IN (SELECT T3.dormid FROM Has_amenity AS T3 JOIN Dorm_amenity AS T4 ON T3.amenid = T4.amenid WHERE T4.amenity_name = 'TV Lounge')"),
    ("allergy_1", "How many students have a food allergy?",
     "food allergy refers to AllergyType = 'food'",
     "SELECT count(DISTINCT T1.StuID) FROM Has_Allergy AS T1 JOIN Allergy_Type AS T2 ON T1.Allergy = T2.Allergy WHERE T2.AllergyType = 'food'"),
    ("allergy_1", "Which allergies affect more than two students?", "",
     "SELECT Allergy FROM Has_Allergy GROUP BY Allergy HAVING count(*) > 2"),
    ("allergy_1", "What are the last names of students who have no allergies?", "",
     "SELECT LName FROM Student WHERE StuID NOT IN (SELECT StuID FROM Has_Allergy)"),
    ("allergy_1", "Which students are allergic to both milk and eggs? Give their first names.", "",
     "SELECT T1.Fname FROM Student AS T1 JOIN Has_Allergy AS T2 ON T1.StuID = T2.StuID WHERE T2.Allergy = 'Milk' INTERSECT SELECT T1.Fname FROM Student AS T1 JOIN Has_Allergy AS T2 ON T1.StuID = T2.StuID WHERE T2.Allergy = 'Eggs'"),
    ("music_1", "List the names of songs in English with a rating above 7.", "",
     "SELECT song_name FROM song WHERE languages = 'english' AND rating > 7"),
    ("music_1", "How many files are there in each format?", "",
     "SELECT formats, count(*) FROM files GROUP BY formats"),
    ("music_1", "Which female artists from the UK prefer pop music?",
     "female refers to gender = 'Female'; from the UK refers to country = 'UK'; pop music refers to preferred_genre = 'pop'",
     "SELECT artist_name FROM artist WHERE gender = 'Female' AND country = 'UK' AND preferred_genre = 'pop'"),
    ("music_1", "Which artist has the most songs? Give the artist's name and country.", "",
     "SELECT T1.artist_name, T1.country FROM artist AS T1 JOIN song AS T2 ON T1.artist_name = T2.artist_name GROUP BY T1.artist_name ORDER BY count(*) DESC LIMIT 1"),
    ("music_1", "Give the names of songs that are blues or have a resolution above 800.", "",
     "SELECT song_name FROM song WHERE genre_is = 'blues' UNION SELECT song_name FROM song WHERE resolution > 800"),
    ("customers_card_transactions", "How many credit cards does each customer hold? Give first and last names with the count.",
     "credit cards refers to card_type_code = 'Credit'",
     "SELECT T1.customer_first_name, T1.customer_last_name, count(*) FROM Customers AS T1 JOIN Customers_Cards AS T2 ON T1.customer_id = T2.customer_id WHERE T2.card_type_code = 'Credit' GROUP BY T1.customer_id"),
    ("customers_card_transactions", "What is the total amount of refund transactions?",
     "refund transactions refers to transaction_type = 'Refund'",
     "SELECT sum(transaction_amount) FROM Financial_Transactions WHERE transaction_type = 'Refund'"),
    ("customers_card_transactions", "How many transactions were made in 2018?",
     "in 2018 refers to strftime('%Y', transaction_date) = '2018'",
     "SELECT count(*) FROM Financial_Transactions WHERE strftime('%Y', transaction_date) = '2018'"),
    ("customers_card_transactions", "Which customers have no account? Give their email addresses.", "",
     "SELECT customer_email FROM Customers WHERE customer_id NOT IN (SELECT customer_id FROM Accounts)"),
    ("customers_card_transactions", "What percentage of the transactions were payments?",
     "payments refers to transaction_type = 'Payment'; percentage = DIVIDE(COUNT(transaction_type = 'Payment'), COUNT(transaction_id)) * 100",
     "SELECT CAST(SUM(CASE WHEN transaction_type = 'Payment' THEN 1 ELSE 0 END) AS REAL) * 100 / count(transaction_id) FROM Financial_Transactions"),
    ("game_1", "How many hours in total has each student played video games? Show the student id and the hours.", "",
     "SELECT StuID, sum(Hours_Played) FROM Plays_Games GROUP BY StuID"),
    ("game_1", "Which students on a scholarship play football? List their last names.",
     "on a scholarship refers to OnScholarship = 'Y'; football refers to SportName = 'Football'",
     "SELECT T1.LName FROM Student AS T1 JOIN SportsInfo AS T2 ON T1.StuID = T2.StuID WHERE T2.OnScholarship = 'Y' AND T2.SportName = 'Football'"),
    ("game_1", "What is the name of the video game played for the most hours in total?", "",
     "SELECT T1.GName FROM Video_Games AS T1 JOIN Plays_Games AS T2 ON T1.GameID = T2.GameID GROUP BY T1.GameID ORDER BY sum(T2.Hours_Played) DESC LIMIT 1"),
    ("club_1", "List the names of the clubs located at AKW.", "",
     "SELECT ClubName FROM Club WHERE ClubLocation = 'AKW'"),
    ("club_1", "How many members does each club have? Show the club names.", "",
     "SELECT T1.ClubName, count(*) FROM Club AS T1 JOIN Member_of_club AS T2 ON T1.ClubID = T2.ClubID GROUP BY T1.ClubID"),
    ("club_1", "Who is the president of the Bootup Baltimore club? Give the first and last name.",
     "president refers to Position = 'President'",
     "SELECT T3.Fname, T3.LName FROM Club AS T1 JOIN Member_of_club AS T2 ON T1.ClubID = T2.ClubID JOIN Student AS T3 ON T2.StuID = T3.StuID WHERE T1.ClubName = 'Bootup Baltimore' AND T2.Position = 'President'"),
    ("company_employee", "What are the names of companies in the banking industry, most profitable first?", "",
     "SELECT Name FROM company WHERE Industry = 'Banking' ORDER BY Profits_in_Billion DESC"),
    ("company_employee", "Show the names of people and of the companies they work for, for those who have worked there more than 3 years.", "",
     "SELECT T3.Name, T2.Name FROM employment AS T1 JOIN company AS T2 ON T1.Company_ID = T2.Company_ID JOIN people AS T3 ON T1.People_ID = T3.People_ID WHERE T1.Year_working > 3"),
    ("company_employee", "Which industries have more than two companies, and what is their average market value?", "",
     "SELECT Industry, avg(Market_Value_in_Billion) FROM company GROUP BY Industry HAVING count(*) > 2"),
    ("company_employee", "What is the age of the youngest employee of the most profitable company?",
     "the most profitable company refers to MAX(Profits_in_Billion); youngest refers to MIN(Age)",
     "SELECT min(T2.Age) FROM employment AS T1 JOIN people AS T2 ON T1.People_ID = T2.People_ID WHERE T1.Company_ID = (SELECT Company_ID FROM company ORDER BY Profits_in_Billion DESC LIMIT 1)"),
    ("election", "Which counties have a population above 50000? List their names, most populous first.", "",
     "SELECT County_name FROM county WHERE Population > 50000 ORDER BY Population DESC"),
    ("election", "Show each delegate and the name of the county of their district.", "",
     "SELECT T2.Delegate, T1.County_name FROM county AS T1 JOIN election AS T2 ON T1.County_Id = T2.District"),
    ("election", "Which party has the most delegates? Give the party's name.",
     "the party's name refers to party.Party; the most delegates refers to MAX(COUNT(election.Delegate))",
     "SELECT T2.Party FROM election AS T1 JOIN party AS T2 ON T1.Party = T2.Party_ID GROUP BY T1.Party ORDER BY count(*) DESC LIMIT 1"),
    ("manufacturer", "What is the average number of factories of the manufacturers opened after 1990?", "",
     "SELECT avg(Num_of_Factories) FROM manufacturer WHERE Open_Year > 1990"),
    ("manufacturer", "Find the furniture sold at a price below the average price, with its number of components.", "",
     "SELECT T1.Name, T1.Num_of_Component FROM furniture AS T1 JOIN furniture_manufacte AS T2 ON T1.Furniture_ID = T2.Furniture_ID WHERE T2.Price_in_Dollar < (SELECT avg(Price_in_Dollar) FROM furniture_manufacte)"),
    ("bike_1", "How many trips started in August 2015 from a station in San Francisco?",
     "August 2015 refers to start_date LIKE '8/%/2015%'; in San Francisco refers to city = 'San Francisco'",
     "SELECT count(*) FROM trip AS T1 JOIN station AS T2 ON T1.start_station_id = T2.id WHERE T2.city = 'San Francisco' AND T1.start_date LIKE '8/%/2015%'"),
    ("bike_1", "What is the average duration in minutes of the trips made by subscribers?",
     "subscribers refers to subscription_type = 'Subscriber'; duration is in seconds; minutes = DIVIDE(duration, 60)",
     "SELECT avg(duration) / 60.0 FROM trip WHERE subscription_type = 'Subscriber'"),
    ("bike_1", "Which stations in San Jose have more than 20 docks?", "",
     "SELECT name FROM station WHERE dock_count > 20 AND city = 'San Jose'"),
    # Spider train questions, N-rep's examples before this pool (db_id, question, evidence, sql).
    ("farm", "Show the status of the city that has hosted the greatest number of competitions.", "",
     "SELECT T1.Status FROM city AS T1 JOIN farm_competition AS T2 ON T1.City_ID = T2.Host_city_ID GROUP BY T2.Host_city_ID ORDER BY COUNT(*) DESC LIMIT 1"),
    ("department_management", "what are the distinct creation years of the departments managed by a secretary born in state 'Alabama'?", "",
     "SELECT DISTINCT T1.Creation FROM department AS T1 JOIN management AS T2 ON T1.Department_ID = T2.department_ID JOIN head AS T3 ON T2.head_ID = T3.head_ID WHERE T3.born_state = 'Alabama'"),
    ("college_2", "Give the title of the course offered in Chandler during the Fall of 2010.", "",
     "SELECT T1.title FROM course AS T1 JOIN section AS T2 ON T1.course_id = T2.course_id WHERE T2.building = 'Chandler' AND T2.semester = 'Fall' AND T2.year = 2010"),
    ("college_2", "Find the buildings which have rooms with capacity more than 50.", "",
     "SELECT DISTINCT building FROM classroom WHERE capacity > 50"),
    ("college_2", "Find the name of the courses that do not have any prerequisite?", "",
     "SELECT title FROM course WHERE course_id NOT IN (SELECT course_id FROM prereq)"),
    ("college_2", "Find the total number of students and total number of instructors for each department.", "",
     "SELECT count(DISTINCT T2.ID), count(DISTINCT T3.ID), T3.dept_name FROM department AS T1 JOIN student AS T2 ON T1.dept_name = T2.dept_name JOIN instructor AS T3 ON T1.dept_name = T3.dept_name GROUP BY T3.dept_name"),
    ("college_2", "Find the id of instructors who taught a class in Fall 2009 but not in Spring 2010.", "",
     "SELECT ID FROM teaches WHERE semester = 'Fall' AND year = 2009 EXCEPT SELECT ID FROM teaches WHERE semester = 'Spring' AND year = 2010"),
    ("college_2", "What are the names and average salaries for departments with average salary higher than 42000?", "",
     "SELECT dept_name, avg(salary) FROM instructor GROUP BY dept_name HAVING avg(salary) > 42000"),
    ("student_assessment", "List the id of students who never attends courses?", "",
     "SELECT student_id FROM Students WHERE student_id NOT IN (SELECT student_id FROM Student_Course_Attendance)"),
    ("customers_and_invoices", "Show the id, the date of account opened, the account name, and other account detail for all accounts.", "",
     "SELECT account_id, date_account_opened, account_name, other_account_details FROM Accounts"),
    ("department_management", "How many heads of the departments are older than 56 ?", "",
     "SELECT count(*) FROM head WHERE age > 56"),
    ("farm", "Show the status shared by cities with population bigger than 1500 and smaller than 500.", "",
     "SELECT Status FROM city WHERE Population > 1500 INTERSECT SELECT Status FROM city WHERE Population < 500"),
    ("school_bus", "Show the names of drivers who have worked on a school bus for more than 5 years.", "",
     "SELECT T1.Name FROM driver AS T1 JOIN school_bus AS T2 ON T1.Driver_ID = T2.Driver_ID WHERE T2.Years_Working > 5"),
]


def build(tables_path: Path) -> dict:
    """The pool file's content: :data:`EXAMPLES`, each schema once, taken from ``tables_path``."""
    entries = {e["db_id"]: e for e in json.loads(tables_path.read_text(encoding="utf-8"))}
    rows = [{"db_id": d, "question": q, "evidence": e, "sql": s} for d, q, e, s in EXAMPLES]
    schemas = {}
    for row in rows:
        schemas.setdefault(row["db_id"], fewshot.compact_schema(entries[row["db_id"]]))
    return {"schemas": dict(sorted(schemas.items())), "examples": rows}


def dump(pool: dict) -> str:
    """The file's text: one schema and one example a line, so that diffs stay readable."""
    schemas = ",\n".join(f"  {json.dumps(k)}: {json.dumps(v, ensure_ascii=False)}" for k, v in pool["schemas"].items())
    rows = ",\n".join(f"  {json.dumps(r, ensure_ascii=False)}" for r in pool["examples"])
    return f'{{"schemas": {{\n{schemas}\n}},\n"examples": [\n{rows}\n]}}\n'


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tables", type=Path, required=True, help="Spider's tables.json")
    parser.add_argument("--check", action="store_true", help="exit 1 when the shipped file is out of date")
    args = parser.parse_args(argv)
    text = dump(build(args.tables))
    if args.check:
        return 0 if POOL.exists() and POOL.read_text(encoding="utf-8") == text else 1
    POOL.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
